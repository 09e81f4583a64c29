package readiness

import (
	"context"
	"errors"
	"net/http"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/etcdcluster"
)

// QuorumSource is what /readyz and /livez ask of this replica's etcd member (*etcdcluster.Member).
type QuorumSource interface {
	QuorumState() etcdcluster.QuorumState
}

// Quorum is the etcd part of /readyz and /livez in cluster mode (see ReplaceEtcdChecks).
type Quorum struct {
	member QuorumSource
	// self is this replica's pod name, as its Service's EndpointSlices name it.
	self string
	// slices holds the EndpointSlices of certapi's own Service; Run fills it.
	slices cache.SharedIndexInformer
}

// NewQuorum watches (once Run) the EndpointSlices of the Service service in namespace, and
// only those: the informer lists and watches with the Service's label and namespace.
func NewQuorum(member QuorumSource, self string, client kubernetes.Interface, namespace, service string) *Quorum {
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
	return &Quorum{member: member, self: self, slices: inf}
}

// Run keeps the EndpointSlices until ctx ends.
func (q *Quorum) Run(ctx context.Context) {
	q.slices.RunWithContext(ctx)
}

// input gathers what DecideReadiness needs.
func (q *Quorum) input() etcdcluster.ReadinessInput {
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
func (q *Quorum) readyz(storage healthz.HealthChecker) healthz.HealthChecker {
	return healthz.NamedCheck(storage.Name(), func(r *http.Request) error {
		d := etcdcluster.DecideReadiness(q.input())
		switch {
		case !d.Ready:
			// The reason reaches the log (/readyz answers only that the check failed).
			klog.FromContext(r.Context()).V(1).Info("Not ready: the etcd cluster has no quorum", "reason", d.Reason)
			return errors.New(d.Reason)
		case d.CheckStorage:
			return storage.Check(r)
		}
		klog.FromContext(r.Context()).V(2).Info("Ready without asking etcd", "reason", d.Reason)
		return nil
	})
}

// livez wraps the storage's etcd check on /livez: while its member knows no leader the process is alive
// and its member runs (were it stopped, certapi would exit); restarting it would bring no quorum back,
// and would take the last replica that answers out of the Service. With a leader, storage decides as it
// always did.
func (q *Quorum) livez(storage healthz.HealthChecker) healthz.HealthChecker {
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

// ReplaceEtcdChecks puts q's checks in place of the etcd checks of /livez and /readyz, under the same
// names (/readyz/etcd-readiness still answers). /healthz, which nothing in certapi's manifests probes,
// keeps the storage's own.
func ReplaceEtcdChecks(c *genericapiserver.Config, q *Quorum) error {
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
