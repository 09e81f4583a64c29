package apiserver

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/signer"
)

// maxServingCertBody bounds a servingcerts body: one PEM certificate request and a little JSON around it.
const maxServingCertBody = signer.MaxCSRBytes

// handlerChain is the generic server's handler chain with certapi's additions. Inside it, after
// authentication, authorization, priority and fairness and the request timeout, a servingcerts body is
// capped at 64 KiB: nothing of a request body is read before authorization; and while the embedded etcd
// cluster has no quorum, resource requests are answered 503 with Retry-After at once
// (retryWithoutQuorum). Around it, a body must arrive
// within the request timeout, and an unread one does not keep its connection (boundRequestBodies); and
// until delegated authentication is usable, requests are answered 503 rather than taken for anonymous
// (retryUntilAuthenticationUsable). Outermost, after SIGTERM every answer closes its connection
// (retireConnectionsOnShutdown).
func handlerChain(auth *authReadiness, quorum quorumSource) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		h := genericapiserver.DefaultBuildHandlerChain(limitServingCertBodies(retryWithoutQuorum(apiHandler, quorum, c.Serializer)), c)
		h = boundRequestBodies(retryUntilAuthenticationUsable(h, auth, c.Serializer), c.RequestTimeout)
		return retireConnectionsOnShutdown(h, c.ShutdownInitiatedNotify())
	}
}

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

// unreadBodyGrace is how long an error answer to an HTTP/1.x request waits for the rest of a body that
// nothing read (the server reads it to keep the connection) before the connection is closed instead.
const unreadBodyGrace = 100 * time.Millisecond

// boundRequestBodies bounds what a request body can cost before anything has decided to read it. It reads
// nothing and so may run, as it does, before authentication:
//   - a request body must arrive within timeout (the request timeout), counted from when its headers were
//     read. The generic server bounds the headers (32 s) and idle connections (90 s) but sets no read
//     timeout, which would end long-running watches; requests without a body, such as watches, are left
//     alone. On HTTP/1.1 it is the connection's read deadline, on HTTP/2 the stream's.
//   - on HTTP/1.x, when the answer is an error (a refused, unauthenticated or throttled request) and the
//     body was not read to its end, the connection is closed unless the rest arrives within
//     unreadBodyGrace. Go's server otherwise reads up to 256 KiB of such a body before it answers, to
//     keep the connection, and a client that stops sending would hold the connection, a goroutine and its
//     buffers (about 90 KiB in all) until the deadline above. HTTP/2 drops an unread body with its stream.
func boundRequestBodies(next http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength == 0 || r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		// A writer that cannot set a deadline (only in tests) leaves the body unbounded, as before.
		if err := rc.SetReadDeadline(time.Now().Add(timeout)); err == nil && r.ProtoMajor == 1 {
			body := &eofBody{ReadCloser: r.Body}
			r.Body = body
			w = responsewriter.WrapForHTTP1Or2(&errorDropsUnreadBody{ResponseWriter: w, body: body, rc: rc})
		}
		next.ServeHTTP(w, r)
	})
}

// eofBody records whether its body was read to the end.
type eofBody struct {
	io.ReadCloser
	eof atomic.Bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

// errorDropsUnreadBody gives the rest of an unread body unreadBodyGrace to arrive when the answer is an
// error; see boundRequestBodies.
type errorDropsUnreadBody struct {
	http.ResponseWriter
	body *eofBody
	rc   *http.ResponseController
}

func (w *errorDropsUnreadBody) WriteHeader(code int) {
	if code >= http.StatusBadRequest && !w.body.eof.Load() {
		_ = w.rc.SetReadDeadline(time.Now().Add(unreadBodyGrace))
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap returns the server's writer, for the generic server's wrappers and http.ResponseController.
func (w *errorDropsUnreadBody) Unwrap() http.ResponseWriter { return w.ResponseWriter }
