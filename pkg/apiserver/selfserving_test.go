package apiserver

import (
	"strings"
	"testing"
)

// TestCheckAuthority: a replica is not ready until it has seen CertificateAuthority/default, and says so.
func TestCheckAuthority(t *testing.T) {
	s, err := newSelfServing("certapi", "certapi-system")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		seen    bool
		wantErr string
	}{
		{name: "before the leader created it", wantErr: "CertificateAuthority/default does not exist yet"},
		{name: "once seen", seen: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.caSeen.Store(tc.seen)
			err := s.checkAuthority(nil)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("not ready: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}
