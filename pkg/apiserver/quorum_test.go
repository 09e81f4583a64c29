package apiserver

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/utils/ptr"

	"github.com/certapi/certapi/pkg/etcdcluster"
)

// fakeQuorum is a member whose quorum the test sets; lost, when set, is its QuorumLostContext.
type fakeQuorum struct {
	st   etcdcluster.QuorumState
	lost context.Context
}

func (f *fakeQuorum) QuorumLost() bool                     { return f.st.Lost }
func (f *fakeQuorum) QuorumState() etcdcluster.QuorumState { return f.st }
func (f *fakeQuorum) QuorumLostContext() context.Context {
	if f.lost != nil {
		return f.lost
	}
	if !f.st.Lost {
		return context.Background()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// requestInfo parses the request info as the generic chain does before retryWithoutQuorum runs.
func requestInfo(h http.Handler) http.Handler {
	return genericapifilters.WithRequestInfo(h, &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")})
}

// TestRetryWithoutQuorumInFlight: a call in flight when the quorum is lost is answered the 503 as soon
// as it is, in place of the error its storage gives; an answer already given, an answer that is no
// server error, and a watch are left alone.
func TestRetryWithoutQuorumInFlight(t *testing.T) {
	const get = "/apis/certapi.dev/v1alpha1/certificateauthorities/default"
	cases := []struct {
		name      string
		path      string
		handler   func(w http.ResponseWriter, r *http.Request, started chan<- struct{})
		wantCode  int
		wantRetry string
	}{
		{"waiting on etcd: 503 once the quorum is lost", get, func(w http.ResponseWriter, r *http.Request, started chan<- struct{}) {
			close(started)
			<-r.Context().Done() // as the storage does
			responsewriters.InternalError(w, r, r.Context().Err())
		}, http.StatusServiceUnavailable, "3"},
		{"returns without writing: 503", get, func(_ http.ResponseWriter, r *http.Request, started chan<- struct{}) {
			close(started)
			<-r.Context().Done()
		}, http.StatusServiceUnavailable, "3"},
		{"answered before: kept", get, func(w http.ResponseWriter, r *http.Request, started chan<- struct{}) {
			w.WriteHeader(http.StatusOK)
			close(started)
			<-r.Context().Done()
			_, _ = w.Write([]byte("{}"))
		}, http.StatusOK, ""},
		{"not a server error: kept", get, func(w http.ResponseWriter, r *http.Request, started chan<- struct{}) {
			close(started)
			<-r.Context().Done()
			w.WriteHeader(http.StatusNotFound)
		}, http.StatusNotFound, ""},
		{"a watch is not cancelled", "/apis/certapi.dev/v1alpha1/servingcertrequests?watch=true", func(w http.ResponseWriter, r *http.Request, started chan<- struct{}) {
			close(started)
			select {
			case <-r.Context().Done():
				w.WriteHeader(http.StatusInternalServerError)
			case <-time.After(200 * time.Millisecond): // a watch that goes on: nothing to wait for
				w.WriteHeader(http.StatusOK)
			}
		}, http.StatusOK, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lost, loseQuorum := context.WithCancel(context.Background())
			defer loseQuorum()
			fq := &fakeQuorum{st: etcdcluster.QuorumState{Voters: 3}, lost: lost}
			started := make(chan struct{})
			h := requestInfo(retryWithoutQuorum(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.handler(w, r, started) }), fq, Codecs))
			rec := httptest.NewRecorder()
			done := make(chan struct{})
			go func() {
				defer close(done)
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
			}()
			<-started
			fq.st = etcdcluster.QuorumState{Lost: true, Voters: 3, Reached: 1}
			loseQuorum()
			<-done
			if rec.Code != tc.wantCode || rec.Header().Get("Retry-After") != tc.wantRetry {
				t.Fatalf("answered %d with Retry-After %q: %s; want %d with %q", rec.Code, rec.Header().Get("Retry-After"), rec.Body, tc.wantCode, tc.wantRetry)
			}
			if tc.wantCode == http.StatusServiceUnavailable && (!strings.Contains(rec.Body.String(), "no quorum") || strings.Count(rec.Body.String(), `"kind":"Status"`) != 1) {
				t.Errorf("the body is not the one Status about the quorum: %s", rec.Body)
			}
		})
	}
}

func TestRetryWithoutQuorum(t *testing.T) {
	lost := etcdcluster.QuorumState{Lost: true, NoLeaderSince: time.Now().Add(-10 * time.Second), Voters: 3, Reached: 1}
	cases := []struct {
		name        string
		quorum      etcdcluster.QuorumState
		method      string
		path        string
		wantRefused bool
	}{
		{"quorum: a get passes", etcdcluster.QuorumState{Voters: 3}, http.MethodGet, "/apis/certapi.dev/v1alpha1/certificateauthorities/default", false},
		{"no leader within the grace: passes", etcdcluster.QuorumState{NoLeaderSince: time.Now(), Voters: 3}, http.MethodGet, "/apis/certapi.dev/v1alpha1/certificateauthorities/default", false},
		{"no quorum: a get is refused", lost, http.MethodGet, "/apis/certapi.dev/v1alpha1/certificateauthorities/default", true},
		{"no quorum: a list is refused", lost, http.MethodGet, "/apis/certapi.dev/v1alpha1/namespaces/ns/servingcertrequests", true},
		{"no quorum: a watch is refused", lost, http.MethodGet, "/apis/certapi.dev/v1alpha1/servingcertrequests?watch=true", true},
		{"no quorum: a create is refused", lost, http.MethodPost, "/apis/certapi.dev/v1alpha1/namespaces/ns/servingcertrequests", true},
		{"no quorum: servingcerts is refused", lost, http.MethodPost, "/apis/certapi.dev/v1alpha1/namespaces/ns/servingcertrequests/a/servingcerts", true},
		{"no quorum: discovery passes", lost, http.MethodGet, "/apis/certapi.dev/v1alpha1", false},
		{"no quorum: group discovery passes", lost, http.MethodGet, "/apis/certapi.dev", false},
		{"no quorum: /apis passes", lost, http.MethodGet, "/apis", false},
		{"no quorum: /readyz passes", lost, http.MethodGet, "/readyz", false},
		{"no quorum: /livez passes", lost, http.MethodGet, "/livez", false},
		{"no quorum: /healthz passes", lost, http.MethodGet, "/healthz", false},
		{"no quorum: /metrics passes", lost, http.MethodGet, "/metrics", false},
		{"no quorum: /version passes", lost, http.MethodGet, "/version", false},
		{"no quorum: /openapi/v3 passes", lost, http.MethodGet, "/openapi/v3", false},
		{"no quorum: another group passes", lost, http.MethodGet, "/apis/example.com/v1/things", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			passed := false
			h := requestInfo(retryWithoutQuorum(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed = true }), &fakeQuorum{st: tc.quorum}, Codecs))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
			if passed == tc.wantRefused {
				t.Fatalf("passed %v; want refused %v", passed, tc.wantRefused)
			}
			if !tc.wantRefused {
				return
			}
			body := rec.Body.String()
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") != "3" {
				t.Fatalf("answered %d with Retry-After %q; want 503 with Retry-After 3", rec.Code, rec.Header().Get("Retry-After"))
			}
			for _, w := range []string{`"kind":"Status"`, `"reason":"ServiceUnavailable"`, `"retryAfterSeconds":3`, "no quorum", "reaches 1 of 3 voting members", "a quorum is 2"} {
				if !strings.Contains(body, w) {
					t.Errorf("the body does not say %s: %s", w, body)
				}
			}
		})
	}
	if h := http.NotFoundHandler(); retryWithoutQuorum(h, nil, Codecs) == nil {
		t.Fatal("no handler without a member")
	}
}

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
	member := &fakeQuorum{}
	q := &quorumReadiness{member: member, self: "certapi-0"}
	if err := replaceEtcdChecks(c, q); err != nil {
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
	member.st = etcdcluster.QuorumState{NoLeaderSince: time.Now(), Voters: 3}
	for _, chk := range []healthz.HealthChecker{c.ReadyzChecks[0], c.ReadyzChecks[1], c.LivezChecks[0]} {
		if err := chk.Check(r); err != nil {
			t.Errorf("%s without a leader, within the grace: %v", chk.Name(), err)
		}
	}
	member.st = etcdcluster.QuorumState{Lost: true, NoLeaderSince: time.Now().Add(-time.Hour), Voters: 3}
	for _, chk := range []healthz.HealthChecker{c.ReadyzChecks[0], c.ReadyzChecks[1], c.LivezChecks[0]} {
		if err := chk.Check(r); err != nil {
			t.Errorf("%s without a quorum, the other replicas unknown: %v", chk.Name(), err)
		}
	}
	if err := c.HealthzChecks[0].Check(r); !errors.Is(err, storageErr) {
		t.Errorf("/healthz/etcd without a quorum: %v; want the storage's answer", err)
	}
	if err := replaceEtcdChecks(&genericapiserver.Config{}, q); err == nil {
		t.Error("nothing to replace: no error")
	}
}
