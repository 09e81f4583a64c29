package filters

import (
	"fmt"
	"io"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/signer"
)

// maxServingCertBody bounds a servingcerts body: one PEM certificate request and a little JSON around it.
const maxServingCertBody = signer.MaxCSRBytes

// limitServingCertBodies caps a servingcerts body at 64 KiB. It reads nothing itself: the generic create
// handler reads the body before it decodes anything, and the cap makes that read fail with 413 as soon as
// the body is known to be too large (at once when Content-Length says so). The generic server's own limit
// (megabytes) is far above what this endpoint ever needs.
//
// It runs inside the handler chain, next to the API handler: an unauthenticated or unauthorized request
// never gets here, so it cannot make certapi buffer anything. It asks the request info the chain has parsed,
// not the path's spelling, whether the call is for the subresource: the API routes `.../servingcerts/` (a
// trailing slash) to the same handler, and every verb with a body is capped, so no spelling gets a large
// body read and decoded.
func limitServingCertBodies(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || !isServingCertsRequest(r) {
			next.ServeHTTP(w, r)
			return
		}
		left := int64(maxServingCertBody)
		if r.ContentLength > maxServingCertBody {
			left = -1 // refused before a byte is read
		}
		r.Body = &cappedBody{ReadCloser: r.Body, left: left}
		next.ServeHTTP(w, r)
	})
}

// isServingCertsRequest reports whether r is a call of the servingcerts subresource, by the request info
// the handler chain parsed from its path.
func isServingCertsRequest(r *http.Request) bool {
	info, ok := request.RequestInfoFrom(r.Context())
	return ok && info.IsResourceRequest && info.APIGroup == certapi.GroupName &&
		info.Resource == "servingcertrequests" && info.Subresource == "servingcerts"
}

// errServingCertBodyTooLarge is what reading a servingcerts body past the cap returns; the generic handler
// answers it as a 413 Status.
var errServingCertBodyTooLarge = apierrors.NewRequestEntityTooLargeError(fmt.Sprintf(
	"a servingcerts request body may be at most %d bytes; it carries one PEM certificate request, far smaller", maxServingCertBody))

// cappedBody returns errServingCertBodyTooLarge once more than the cap has been read.
type cappedBody struct {
	io.ReadCloser
	left int64 // bytes that may still be read; negative once over the cap
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errServingCertBodyTooLarge
	}
	// One byte more than allowed tells a body of exactly the cap from a longer one.
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return 0, errServingCertBodyTooLarge
	}
	return n, err
}
