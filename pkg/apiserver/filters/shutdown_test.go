package filters

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRetireConnectionsOnShutdown(t *testing.T) {
	for _, tc := range []struct {
		name       string
		protoMajor int
		shutdown   bool
		wantClose  bool
	}{
		{name: "HTTP/1.1 while serving", protoMajor: 1},
		{name: "HTTP/1.1 after SIGTERM", protoMajor: 1, shutdown: true, wantClose: true},
		// Over HTTP/2, Connection: close means a GOAWAY that fails the calls in flight.
		{name: "HTTP/2 after SIGTERM", protoMajor: 2, shutdown: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shuttingDown := make(chan struct{})
			if tc.shutdown {
				close(shuttingDown)
			}
			served := false
			h := retireConnectionsOnShutdown(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				served = true
				w.WriteHeader(http.StatusCreated)
			}), shuttingDown)
			r := httptest.NewRequest(http.MethodPost, "/apis/certapi.dev/v1alpha1/namespaces/a/servingcertrequests/b/servingcerts", nil)
			r.ProtoMajor = tc.protoMajor
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if !served || w.Code != http.StatusCreated {
				t.Errorf("the call was not answered in full: served %v, code %d", served, w.Code)
			}
			if got := w.Header().Get("Connection") == "close"; got != tc.wantClose {
				t.Errorf("Connection: close %v; want %v", got, tc.wantClose)
			}
		})
	}
}
