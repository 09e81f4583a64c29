package filters

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/etcdcluster"
)

// QuorumRetryAfterSeconds is the Retry-After of the 503 certapi answers while its etcd cluster has no
// quorum. A quorum comes back only with a member, seconds at the least, and then within an election
// (about a second): a caller that retries after 3 s is back within 3 s of the quorum. client-go retries
// such an answer up to 10 times, so its caller waits about 30 s in all before it sees the 503: within
// the 44 s bound documented for every servingcerts call (11 x (--handoff-timeout + 1 s)), and within
// pkg/servingcert's default RequestTimeout (30 s). A longer wait would hold callers past that bound; a
// shorter one sends more calls through kube-apiserver for nothing.
const QuorumRetryAfterSeconds = 3

// QuorumSource is what the handler chain asks of this replica's etcd member (*etcdcluster.Member).
type QuorumSource interface {
	QuorumLost() bool
	QuorumLostContext() context.Context
	QuorumState() etcdcluster.QuorumState
}

// errQuorumLost is the cause a call in flight is cancelled with when the quorum is lost.
var errQuorumLost = errors.New("the etcd cluster lost its quorum")

// retryWithoutQuorum answers every resource request of certapi.dev at once with 503, Retry-After and a
// Status saying what the member sees, while this replica's etcd member has known no leader for
// etcdcluster.NoLeaderGrace: no call waits out etcd's timeouts for an answer that cannot come. A call
// already in flight when the quorum is held lost (it arrived within the grace, or just before) is
// cancelled then, unless it has answered already: a read, or a certificate asked of servingcerts, is
// answered the same way; a write is answered 504 without Retry-After (inFlightWriteError), because its
// proposal may already be with the etcd leader and be applied later, even after a write that follows it,
// and client-go sends a request again by itself when it has a Retry-After. Watches are left alone: the
// watch cache serves them without etcd. Discovery, /version, /openapi, /metrics and the health checks
// are answered as always (they need no etcd), so kube-apiserver keeps certapi's APIService Available.
// It sits inside the handler chain, after authentication and authorization, where the request's info is
// parsed: whoever gets the 503 may call the API. q nil (a single member, --etcd-servers) changes nothing.
func retryWithoutQuorum(next http.Handler, q QuorumSource, s runtime.NegotiatedSerializer) http.Handler {
	if q == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := request.RequestInfoFrom(r.Context())
		if !ok || !info.IsResourceRequest || info.APIGroup != certapi.GroupName {
			next.ServeHTTP(w, r)
			return
		}
		gv := schema.GroupVersion{Group: info.APIGroup, Version: info.APIVersion}
		refuse := func() {
			w.Header().Set("Retry-After", strconv.Itoa(QuorumRetryAfterSeconds))
			responsewriters.ErrorNegotiated(noQuorumError(q.QuorumState(), info), s, gv, w, r)
		}
		if q.QuorumLost() {
			refuse()
			return
		}
		cancelled := refuse
		if !retrySafe(info) {
			cancelled = func() { responsewriters.ErrorNegotiated(inFlightWriteError(q.QuorumState(), info), s, gv, w, r) }
		}
		if info.Verb == "watch" {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		stop := context.AfterFunc(q.QuorumLostContext(), func() { cancel(errQuorumLost) })
		defer stop()
		qw := &quorumWriter{ResponseWriter: w, ctx: ctx, refuse: cancelled}
		next.ServeHTTP(responsewriter.WrapForHTTP1Or2(qw), r.WithContext(ctx))
		if !qw.wroteHeader && errors.Is(context.Cause(ctx), errQuorumLost) {
			cancelled()
		}
	})
}

// quorumWriter replaces the error a call answers after the quorum was lost under it (its context
// cancelled with errQuorumLost: a 5xx, as the storage fails) with retryWithoutQuorum's 503. An answer
// that was already under way, or that is not a server error, goes through as it is.
type quorumWriter struct {
	http.ResponseWriter
	ctx    context.Context
	refuse func()
	// wroteHeader: the status is decided; refused: it was the 503, and the handler's body is dropped.
	wroteHeader, refused bool
}

// Unwrap returns the writer quorumWriter decorates (responsewriter.UserProvidedDecorator).
func (w *quorumWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// WriteHeader refuses in place of a server error written after the quorum was lost.
func (w *quorumWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	w.wroteHeader = true
	if code >= http.StatusInternalServerError && errors.Is(context.Cause(w.ctx), errQuorumLost) {
		w.refused = true
		w.refuse()
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write drops the handler's body once refused.
func (w *quorumWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.refused {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}

// retrySafe reports whether a request cancelled in flight may be sent again as it is: a read, which
// changes nothing, or a certificate asked of servingcerts, which stores nothing a second one could
// contradict. Any other write may have reached the etcd leader.
func retrySafe(info *request.RequestInfo) bool {
	switch info.Verb {
	case "get", "list", "watch":
		return true
	}
	return info.Verb == "create" && info.Subresource == "servingcerts"
}

// inFlightWriteError is the answer of a write cancelled in flight when the quorum was lost: 504, whose
// outcome is unknown, with no Retry-After, so that no client sends it again unread. A create that
// client-go sent again after a 503 and that succeeded the second time could otherwise be applied twice:
// its first proposal reaching the etcd leader once the network heals, after a delete that followed it,
// and bringing the object back (the checker of docs/high-availability.md found it so).
func inFlightWriteError(q etcdcluster.QuorumState, info *request.RequestInfo) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusGatewayTimeout,
		Reason: metav1.StatusReasonTimeout,
		Message: fmt.Sprintf("certapi's etcd cluster lost its quorum while this %s was in flight: %s; it may or may not have been applied, and may still be: read the object before you write it again",
			info.Verb, q),
		Details: &metav1.StatusDetails{Group: info.APIGroup, Kind: info.Resource, Name: info.Name},
	}}
}

// noQuorumError is the 503 of a call answered without a quorum.
func noQuorumError(q etcdcluster.QuorumState, info *request.RequestInfo) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusServiceUnavailable,
		Reason: metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("certapi's etcd cluster has no quorum: %s; nothing can be read or written until a quorum of members is back; retry after %ds",
			q, QuorumRetryAfterSeconds),
		Details: &metav1.StatusDetails{Group: info.APIGroup, Kind: info.Resource, Name: info.Name, RetryAfterSeconds: QuorumRetryAfterSeconds},
	}}
}
