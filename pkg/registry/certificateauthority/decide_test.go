package certificateauthority

import (
	"errors"
	"testing"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

func TestLeaderStatus(t *testing.T) {
	for _, tc := range []struct {
		name     string
		identity string
		ok       bool
		err      error
		want     certapi.CertificateAuthorityLeader
	}{
		{"a replica leads", "certapi-1", true, nil, certapi.CertificateAuthorityLeader{State: certapi.LeaderStateElected, Identity: "certapi-1"}},
		{"none leads", "", false, nil, certapi.CertificateAuthorityLeader{State: certapi.LeaderStateNone}},
		{"an empty identity is no leader", "", true, nil, certapi.CertificateAuthorityLeader{State: certapi.LeaderStateNone}},
		{"etcd unreadable", "", false, errors.New("context deadline exceeded"), certapi.CertificateAuthorityLeader{State: certapi.LeaderStateUnknown}},
		{"an error wins over an identity", "certapi-0", true, errors.New("boom"), certapi.CertificateAuthorityLeader{State: certapi.LeaderStateUnknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaderStatus(tc.identity, tc.ok, tc.err); got == nil || *got != tc.want {
				t.Errorf("leaderStatus(%q, %t, %v) = %+v, want %+v", tc.identity, tc.ok, tc.err, got, tc.want)
			}
		})
	}
}

func TestLeaderCell(t *testing.T) {
	for _, tc := range []struct {
		leader *certapi.CertificateAuthorityLeader
		want   string
	}{
		{&certapi.CertificateAuthorityLeader{State: certapi.LeaderStateElected, Identity: "certapi-2"}, "certapi-2"},
		{&certapi.CertificateAuthorityLeader{State: certapi.LeaderStateElected}, "<unknown>"},
		{&certapi.CertificateAuthorityLeader{State: certapi.LeaderStateNone}, "<none>"},
		{&certapi.CertificateAuthorityLeader{State: certapi.LeaderStateUnknown}, "<unknown>"},
		{&certapi.CertificateAuthorityLeader{State: "Later"}, "<unknown>"},
		{nil, "<unknown>"},
	} {
		if got := leaderCell(tc.leader); got != tc.want {
			t.Errorf("leaderCell(%+v) = %q, want %q", tc.leader, got, tc.want)
		}
	}
}
