package filters

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapifilters "k8s.io/apiserver/pkg/endpoints/filters"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// countingBody counts what was read from it.
type countingBody struct {
	io.Reader
	read int
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	b.read += n
	return n, err
}

func (b *countingBody) Close() error { return nil }

func TestLimitServingCertBodies(t *testing.T) {
	const path = "/apis/certapi.dev/v1alpha1/namespaces/ns/servingcertrequests/a/servingcerts"
	cases := []struct {
		name          string
		method, path  string
		size          int
		contentLength int64 // -1: unknown (chunked)
		wantTooLarge  bool
		wantMaxRead   int // at most this much read from the client's body
	}{
		{name: "at the cap", method: http.MethodPost, path: path, size: maxServingCertBody, contentLength: maxServingCertBody, wantMaxRead: maxServingCertBody},
		{name: "one byte over, chunked", method: http.MethodPost, path: path, size: maxServingCertBody + 1, contentLength: -1, wantTooLarge: true, wantMaxRead: maxServingCertBody + 1},
		{name: "far over, chunked", method: http.MethodPost, path: path, size: 10 * maxServingCertBody, contentLength: -1, wantTooLarge: true, wantMaxRead: maxServingCertBody + 1},
		{name: "Content-Length over the cap: nothing read", method: http.MethodPost, path: path, size: maxServingCertBody + 1, contentLength: maxServingCertBody + 1, wantTooLarge: true, wantMaxRead: 0},
		{name: "another path is not capped", method: http.MethodPost, path: "/apis/certapi.dev/v1alpha1/namespaces/ns/servingcertrequests", size: 2 * maxServingCertBody, contentLength: -1, wantMaxRead: 2 * maxServingCertBody},
		{name: "a trailing slash is the same subresource", method: http.MethodPost, path: path + "/", size: 10 * maxServingCertBody, contentLength: -1, wantTooLarge: true, wantMaxRead: maxServingCertBody + 1},
		{name: "every verb with a body is capped", method: http.MethodPut, path: path, size: 2 * maxServingCertBody, contentLength: -1, wantTooLarge: true, wantMaxRead: maxServingCertBody + 1},
		{name: "the parent's status is not capped", method: http.MethodPut, path: "/apis/certapi.dev/v1alpha1/namespaces/ns/servingcertrequests/a/status", size: 2 * maxServingCertBody, contentLength: -1, wantMaxRead: 2 * maxServingCertBody},
		{name: "another group's servingcerts is not capped", method: http.MethodPost, path: "/apis/example.com/v1/namespaces/ns/servingcertrequests/a/servingcerts", size: 2 * maxServingCertBody, contentLength: -1, wantMaxRead: 2 * maxServingCertBody},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := &countingBody{Reader: strings.NewReader(strings.Repeat("x", tc.size))}
			var got []byte
			var readErr error
			// The request info is parsed by the generic chain before the cap runs, as in certapi.
			h := genericapifilters.WithRequestInfo(limitServingCertBodies(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// What the generic create handler does first: read the whole body.
				got, readErr = io.ReadAll(r.Body)
			})), &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")})
			r := httptest.NewRequest(tc.method, tc.path, nil)
			r.Body, r.ContentLength = client, tc.contentLength
			h.ServeHTTP(httptest.NewRecorder(), r)
			if client.read > tc.wantMaxRead {
				t.Errorf("read %d bytes of the body, want at most %d", client.read, tc.wantMaxRead)
			}
			if !tc.wantTooLarge {
				if readErr != nil || len(got) != tc.size {
					t.Fatalf("read %d bytes, %v; want all %d", len(got), readErr, tc.size)
				}
				return
			}
			if !apierrors.IsRequestEntityTooLargeError(readErr) || !strings.Contains(readErr.Error(), fmt.Sprintf("at most %d bytes", maxServingCertBody)) {
				t.Fatalf("reading: %v; want a 413 that says the limit", readErr)
			}
		})
	}
}
