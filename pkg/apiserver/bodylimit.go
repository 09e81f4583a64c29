package apiserver

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/certapi/certapi/pkg/signer"
)

// maxServingCertBody bounds a servingcerts body: one PEM certificate request and a little JSON around it.
const maxServingCertBody = signer.MaxCSRBytes

// limitServingCertBodies refuses a servingcerts body over 64 KiB with 413 before anything parses it; the
// generic server's own limit (megabytes) is far above what this endpoint ever needs.
func limitServingCertBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/servingcerts") || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		if r.ContentLength > maxServingCertBody {
			tooLarge(w)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxServingCertBody+1))
		if err != nil {
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if len(body) > maxServingCertBody {
			tooLarge(w)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

func tooLarge(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusRequestEntityTooLarge)
	fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"a servingcerts request body may be at most %d bytes; it carries one PEM certificate request, far smaller","reason":"RequestEntityTooLarge","code":413}`+"\n", maxServingCertBody)
}
