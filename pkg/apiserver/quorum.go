package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/endpoints/responsewriter"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

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

// quorumSource is what the handler chain and /readyz ask of this replica's etcd member.
type quorumSource interface {
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
// cancelled then and answered the same way, unless it has answered already. Watches are left alone: the
// watch cache serves them without etcd. Discovery, /version, /openapi, /metrics and the health checks
// are answered as always (they need no etcd), so kube-apiserver keeps certapi's APIService Available.
// It sits inside the handler chain, after authentication and authorization, where the request's info is
// parsed: whoever gets the 503 may call the API. q nil (a single member, --etcd-servers) changes nothing.
func retryWithoutQuorum(next http.Handler, q quorumSource, s runtime.NegotiatedSerializer) http.Handler {
	if q == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := request.RequestInfoFrom(r.Context())
		if !ok || !info.IsResourceRequest || info.APIGroup != certapi.GroupName {
			next.ServeHTTP(w, r)
			return
		}
		refuse := func() {
			w.Header().Set("Retry-After", strconv.Itoa(QuorumRetryAfterSeconds))
			responsewriters.ErrorNegotiated(noQuorumError(q.QuorumState(), info), s, schema.GroupVersion{Group: info.APIGroup, Version: info.APIVersion}, w, r)
		}
		if q.QuorumLost() {
			refuse()
			return
		}
		if info.Verb == "watch" {
			next.ServeHTTP(w, r)
			return
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		stop := context.AfterFunc(q.QuorumLostContext(), func() { cancel(errQuorumLost) })
		defer stop()
		qw := &quorumWriter{ResponseWriter: w, ctx: ctx, refuse: refuse}
		next.ServeHTTP(responsewriter.WrapForHTTP1Or2(qw), r.WithContext(ctx))
		if !qw.wroteHeader && errors.Is(context.Cause(ctx), errQuorumLost) {
			refuse()
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

// quorumReadiness is the etcd part of /readyz and /livez in cluster mode (see replaceEtcdChecks).
type quorumReadiness struct {
	member quorumSource
	// self is this replica's pod name, as its Service's EndpointSlices name it.
	self string
	// slices holds the EndpointSlices of certapi's own Service; run fills it.
	slices cache.SharedIndexInformer
}

// newQuorumReadiness watches (once run) the EndpointSlices of the Service service in namespace, and
// only those: the informer lists and watches with the Service's label and namespace.
func newQuorumReadiness(member quorumSource, self string, client kubernetes.Interface, namespace, service string) *quorumReadiness {
	selector := discoveryv1.LabelServiceName + "=" + service
	lw := cache.NewFilteredListWatchFromClient(client.DiscoveryV1().RESTClient(), "endpointslices", namespace, func(o *metav1.ListOptions) {
		o.LabelSelector = selector
	})
	inf := cache.NewSharedIndexInformer(lw, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	// Only the endpoints' pod names and conditions are read.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
			es.ManagedFields, es.Annotations = nil, nil
		}
		return obj, nil
	})
	return &quorumReadiness{member: member, self: self, slices: inf}
}

// run keeps the EndpointSlices until ctx ends.
func (q *quorumReadiness) run(ctx context.Context) {
	q.slices.RunWithContext(ctx)
}

// input gathers what DecideReadiness needs.
func (q *quorumReadiness) input() etcdcluster.ReadinessInput {
	in := etcdcluster.ReadinessInput{Now: time.Now(), Quorum: q.member.QuorumState(), PeersKnown: q.slices != nil && q.slices.HasSynced()}
	if in.PeersKnown && in.Quorum.Lost {
		var slices []*discoveryv1.EndpointSlice
		for _, obj := range q.slices.GetStore().List() {
			if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
				slices = append(slices, es)
			}
		}
		in.OthersReady = readyReplicas(slices, q.self)
	}
	return in
}

// readyReplicas names the pods other than self that slices list as Ready (a Ready condition not set
// counts as Ready, as the EndpointSlice API says to read it), each once.
func readyReplicas(slices []*discoveryv1.EndpointSlice, self string) []string {
	seen := map[string]bool{}
	var names []string
	for _, es := range slices {
		for _, ep := range es.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Name == "" || ep.TargetRef.Name == self || seen[ep.TargetRef.Name] {
				continue
			}
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			seen[ep.TargetRef.Name] = true
			names = append(names, ep.TargetRef.Name)
		}
	}
	return names
}

// readyz wraps the storage's own etcd readiness check: DecideReadiness decides, and the storage's check
// (an etcd read) is asked only while the member knows a leader, as it always was; without one it could
// only time out.
func (q *quorumReadiness) readyz(storage healthz.HealthChecker) healthz.HealthChecker {
	return healthz.NamedCheck(storage.Name(), func(r *http.Request) error {
		d := etcdcluster.DecideReadiness(q.input())
		switch {
		case !d.Ready:
			// The reason reaches the log (/readyz answers only that the check failed).
			klog.V(1).InfoS("Not ready: the etcd cluster has no quorum", "reason", d.Reason)
			return errors.New(d.Reason)
		case d.CheckStorage:
			return storage.Check(r)
		}
		klog.V(2).InfoS("Ready without asking etcd", "reason", d.Reason)
		return nil
	})
}

// livez wraps the storage's etcd check on /livez: while its member knows no leader the process is alive
// and its member runs (were it stopped, certapi would exit); restarting it would bring no quorum back,
// and would take the last replica that answers out of the Service. With a leader, storage decides as it
// always did.
func (q *quorumReadiness) livez(storage healthz.HealthChecker) healthz.HealthChecker {
	return healthz.NamedCheck(storage.Name(), func(r *http.Request) error {
		if !q.member.QuorumState().NoLeaderSince.IsZero() {
			return nil
		}
		return storage.Check(r)
	})
}

// etcdCheckNames are the checks k8s.io/apiserver's etcd options add: "etcd" on /healthz, /livez and
// /readyz, "etcd-readiness" on /readyz.
var etcdCheckNames = map[string]bool{"etcd": true, "etcd-readiness": true}

// replaceEtcdChecks puts q's checks in place of the etcd checks of /livez and /readyz, under the same
// names (/readyz/etcd-readiness still answers). /healthz, which nothing in certapi's manifests probes,
// keeps the storage's own.
func replaceEtcdChecks(c *genericapiserver.Config, q *quorumReadiness) error {
	replaced := 0
	for i, chk := range c.ReadyzChecks {
		if etcdCheckNames[chk.Name()] {
			c.ReadyzChecks[i] = q.readyz(chk)
			replaced++
		}
	}
	for i, chk := range c.LivezChecks {
		if etcdCheckNames[chk.Name()] {
			c.LivezChecks[i] = q.livez(chk)
			replaced++
		}
	}
	if replaced == 0 {
		return errors.New("found none of the generic server's etcd checks to replace with the quorum-aware ones")
	}
	return nil
}
