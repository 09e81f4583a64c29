package filters

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/endpoints/responsewriter"
)

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
