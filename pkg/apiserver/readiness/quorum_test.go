package readiness

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/utils/ptr"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/etcdcluster/etcdclustertest"
)

func TestReadyReplicas(t *testing.T) {
	ep := func(pod string, ready *bool) discoveryv1.Endpoint {
		e := discoveryv1.Endpoint{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
		if pod != "" {
			e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: pod}
		}
		return e
	}
	slice := func(eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{Endpoints: eps}
	}
	cases := []struct {
		name   string
		slices []*discoveryv1.EndpointSlice
		want   []string
	}{
		{"none", nil, nil},
		{"only itself", []*discoveryv1.EndpointSlice{slice(ep("certapi-0", ptr.To(true)))}, nil},
		{"others Ready and not", []*discoveryv1.EndpointSlice{slice(ep("certapi-0", ptr.To(true)), ep("certapi-1", ptr.To(true)), ep("certapi-2", ptr.To(false)))}, []string{"certapi-1"}},
		{"Ready not set counts as Ready", []*discoveryv1.EndpointSlice{slice(ep("certapi-1", nil))}, []string{"certapi-1"}},
		{"one pod in two slices (IPv4 and IPv6) counts once", []*discoveryv1.EndpointSlice{slice(ep("certapi-1", ptr.To(true))), slice(ep("certapi-1", ptr.To(true)))}, []string{"certapi-1"}},
		{"no target: not a replica", []*discoveryv1.EndpointSlice{slice(ep("", ptr.To(true)))}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := readyReplicas(tc.slices, "certapi-0"); !slices.Equal(got, tc.want) {
				t.Fatalf("readyReplicas = %v; want %v", got, tc.want)
			}
		})
	}
}

// TestReplaceEtcdChecks: the generic server's etcd checks on /livez and /readyz give way to the
// quorum-aware ones under the same names; /healthz keeps the storage's own, and other checks stay.
func TestReplaceEtcdChecks(t *testing.T) {
	storageErr := errors.New("etcd: context deadline exceeded")
	etcdCheck := healthz.NamedCheck("etcd", func(*http.Request) error { return storageErr })
	readiness := healthz.NamedCheck("etcd-readiness", func(*http.Request) error { return storageErr })
	other := healthz.NamedCheck("other", func(*http.Request) error { return nil })
	c := &genericapiserver.Config{
		HealthzChecks: []healthz.HealthChecker{etcdCheck, other},
		LivezChecks:   []healthz.HealthChecker{etcdCheck, other},
		ReadyzChecks:  []healthz.HealthChecker{etcdCheck, readiness, other},
	}
	member := &etcdclustertest.Quorum{}
	q := &Quorum{member: member, self: "certapi-0"}
	if err := ReplaceEtcdChecks(c, q); err != nil {
		t.Fatal(err)
	}
	names := func(cs []healthz.HealthChecker) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name())
		}
		return out
	}
	if got := names(c.ReadyzChecks); !slices.Equal(got, []string{"etcd", "etcd-readiness", "other"}) {
		t.Fatalf("readyz checks %v", got)
	}
	if got := names(c.LivezChecks); !slices.Equal(got, []string{"etcd", "other"}) {
		t.Fatalf("livez checks %v", got)
	}
	r := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	// With a quorum the storage decides, as before.
	for _, chk := range []healthz.HealthChecker{c.ReadyzChecks[0], c.ReadyzChecks[1], c.LivezChecks[0], c.HealthzChecks[0]} {
		if err := chk.Check(r); !errors.Is(err, storageErr) {
			t.Errorf("%s with a quorum: %v; want the storage's answer", chk.Name(), err)
		}
	}
	// Without a leader /livez and /readyz pass (no other replica known) and etcd is not asked; /healthz
	// keeps the storage's check.
	member.State = etcdcluster.QuorumState{NoLeaderSince: time.Now(), Voters: 3}
	for _, chk := range []healthz.HealthChecker{c.ReadyzChecks[0], c.ReadyzChecks[1], c.LivezChecks[0]} {
		if err := chk.Check(r); err != nil {
			t.Errorf("%s without a leader, within the grace: %v", chk.Name(), err)
		}
	}
	member.State = etcdcluster.QuorumState{Lost: true, NoLeaderSince: time.Now().Add(-time.Hour), Voters: 3}
	for _, chk := range []healthz.HealthChecker{c.ReadyzChecks[0], c.ReadyzChecks[1], c.LivezChecks[0]} {
		if err := chk.Check(r); err != nil {
			t.Errorf("%s without a quorum, the other replicas unknown: %v", chk.Name(), err)
		}
	}
	if err := c.HealthzChecks[0].Check(r); !errors.Is(err, storageErr) {
		t.Errorf("/healthz/etcd without a quorum: %v; want the storage's answer", err)
	}
	if err := ReplaceEtcdChecks(&genericapiserver.Config{}, q); err == nil {
		t.Error("nothing to replace: no error")
	}
}
