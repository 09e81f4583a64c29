package filters

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/scheme"
)

// fakeGate is delegated authentication that is not usable while err is set.
type fakeGate struct{ err error }

func (g *fakeGate) AuthenticationUsable() error { return g.err }

func TestRetryUntilAuthenticationUsable(t *testing.T) {
	a := &fakeGate{err: errors.New("delegated authentication is not usable yet: the client CA is not loaded yet")}
	reached := 0
	h := retryUntilAuthenticationUsable(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached++ }), a, scheme.Codecs)
	serve := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("POST", path, nil))
		return w
	}
	w := serve("/apis/certapi.dev/v1alpha1/namespaces/a/servingcertrequests/b/servingcerts")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), "certapi is starting") || !strings.Contains(w.Body.String(), "client CA") {
		t.Errorf("before the client CA is loaded: %d, Retry-After %q, %s; want 503 with Retry-After: 1 that says why", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	for _, p := range []string{"/readyz", "/readyz/certapi-delegated-authentication", "/livez", "/healthz"} {
		if w := serve(p); w.Code != http.StatusOK {
			t.Errorf("%s before the client CA is loaded: %d; health checks must get through", p, w.Code)
		}
	}
	if reached != 4 {
		t.Fatalf("the chain was reached %d times; want only the 4 health checks", reached)
	}
	a.err = nil
	if w := serve("/apis/certapi.dev/v1alpha1"); w.Code != http.StatusOK || reached != 5 {
		t.Fatalf("once usable: %d, reached %d times", w.Code, reached)
	}
	if h := http.NotFoundHandler(); retryUntilAuthenticationUsable(h, nil, scheme.Codecs) == nil {
		t.Fatal("no handler without a gate")
	}
}
