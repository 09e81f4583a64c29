package filters

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/etcdcluster/etcdclustertest"
)

// requestInfo parses the request info as the generic chain does before retryWithoutQuorum runs.
func requestInfo(h http.Handler) http.Handler {
	return genericapifilters.WithRequestInfo(h, &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")})
}

// TestRetryWithoutQuorumInFlight: a call in flight when the quorum is lost is answered as soon as it is,
// in place of the error its storage gives: a read, or a certificate of servingcerts, the 503 with
// Retry-After; a write 504 without (it may yet be applied, so nothing may send it again unread). An
// answer already given, an answer that is no server error, and a watch are left alone.
func TestRetryWithoutQuorumInFlight(t *testing.T) {
	const get = "/apis/certapi.dev/v1alpha1/certificateauthorities/default"
	const scrs = "/apis/certapi.dev/v1alpha1/namespaces/ns/servingcertrequests"
	waitOnEtcd := func(w http.ResponseWriter, r *http.Request, started chan<- struct{}) {
		close(started)
		<-r.Context().Done() // as the storage does
		responsewriters.InternalError(w, r, r.Context().Err())
	}
	cases := []struct {
		name      string
		method    string
		path      string
		handler   func(w http.ResponseWriter, r *http.Request, started chan<- struct{})
		wantCode  int
		wantRetry string
	}{
		{"waiting on etcd: 503 once the quorum is lost", "", get, waitOnEtcd, http.StatusServiceUnavailable, "3"},
		{"returns without writing: 503", "", get, func(_ http.ResponseWriter, r *http.Request, started chan<- struct{}) {
			close(started)
			<-r.Context().Done()
		}, http.StatusServiceUnavailable, "3"},
		{"answered before: kept", "", get, func(w http.ResponseWriter, r *http.Request, started chan<- struct{}) {
			w.WriteHeader(http.StatusOK)
			close(started)
			<-r.Context().Done()
			_, _ = w.Write([]byte("{}"))
		}, http.StatusOK, ""},
		{"not a server error: kept", "", get, func(w http.ResponseWriter, r *http.Request, started chan<- struct{}) {
			close(started)
			<-r.Context().Done()
			w.WriteHeader(http.StatusNotFound)
		}, http.StatusNotFound, ""},
		{"a watch is not cancelled", "", "/apis/certapi.dev/v1alpha1/servingcertrequests?watch=true", func(w http.ResponseWriter, r *http.Request, started chan<- struct{}) {
			close(started)
			select {
			case <-r.Context().Done():
				w.WriteHeader(http.StatusInternalServerError)
			case <-time.After(200 * time.Millisecond): // a watch that goes on: nothing to wait for
				w.WriteHeader(http.StatusOK)
			}
		}, http.StatusOK, ""},
		{"a create waiting on etcd: 504, no Retry-After", http.MethodPost, scrs, waitOnEtcd, http.StatusGatewayTimeout, ""},
		{"a delete waiting on etcd: 504, no Retry-After", http.MethodDelete, scrs + "/a", waitOnEtcd, http.StatusGatewayTimeout, ""},
		{"a status update waiting on etcd: 504, no Retry-After", http.MethodPut, scrs + "/a/status", waitOnEtcd, http.StatusGatewayTimeout, ""},
		{"a certificate asked of servingcerts: 503 with Retry-After", http.MethodPost, scrs + "/a/servingcerts", waitOnEtcd, http.StatusServiceUnavailable, "3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lost, loseQuorum := context.WithCancel(context.Background())
			defer loseQuorum()
			fq := &etcdclustertest.Quorum{State: etcdcluster.QuorumState{Voters: 3}, Lost: lost}
			started := make(chan struct{})
			h := requestInfo(retryWithoutQuorum(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.handler(w, r, started) }), fq, scheme.Codecs))
			rec := httptest.NewRecorder()
			done := make(chan struct{})
			go func() {
				defer close(done)
				method := tc.method
				if method == "" {
					method = http.MethodGet
				}
				h.ServeHTTP(rec, httptest.NewRequest(method, tc.path, nil))
			}()
			<-started
			fq.State = etcdcluster.QuorumState{Lost: true, Voters: 3, Reached: 1}
			loseQuorum()
			<-done
			if rec.Code != tc.wantCode || rec.Header().Get("Retry-After") != tc.wantRetry {
				t.Fatalf("answered %d with Retry-After %q: %s; want %d with %q", rec.Code, rec.Header().Get("Retry-After"), rec.Body, tc.wantCode, tc.wantRetry)
			}
			if tc.wantCode == http.StatusServiceUnavailable && (!strings.Contains(rec.Body.String(), "no quorum") || strings.Count(rec.Body.String(), `"kind":"Status"`) != 1) {
				t.Errorf("the body is not the one Status about the quorum: %s", rec.Body)
			}
			if tc.wantCode == http.StatusGatewayTimeout && (!strings.Contains(rec.Body.String(), "may or may not have been applied") || strings.Count(rec.Body.String(), `"kind":"Status"`) != 1) {
				t.Errorf("the body is not the one Status about a write whose outcome is unknown: %s", rec.Body)
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
			h := requestInfo(retryWithoutQuorum(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { passed = true }), &etcdclustertest.Quorum{State: tc.quorum}, scheme.Codecs))
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
	if h := http.NotFoundHandler(); retryWithoutQuorum(h, nil, scheme.Codecs) == nil {
		t.Fatal("no handler without a member")
	}
}
