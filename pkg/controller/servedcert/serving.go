package servedcert

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/servedcert"
)

// ServingCondition is the Serving condition of a ServingCertRequest whose Service the injected objects'
// slots in results name (all of them name it; at least one): True when every endpoint of every slot
// presents a certificate the injected bundle verifies for the Service's name (reason Verified, or
// ExpiringSoon when one is about to expire), Unknown when the worst finding is an endpoint certapi cannot
// reach (Unreachable: nothing is known of what it serves), False otherwise with the worst state as the
// reason. The message names the worst slot and what its endpoint presents.
func ServingCondition(results []TargetResult, generation int64) metav1.Condition {
	worst := results[0]
	for _, r := range results[1:] {
		if servedcert.Worse(r.State, worst.State) {
			worst = r
		}
	}
	c := metav1.Condition{Type: certapiv1alpha1.ConditionServing, Reason: string(worst.State), ObservedGeneration: generation}
	switch {
	case !worst.State.Failing():
		c.Status = metav1.ConditionTrue
	case worst.State == servedcert.Unreachable:
		c.Status = metav1.ConditionUnknown
	default:
		c.Status = metav1.ConditionFalse
	}
	c.Message = fmt.Sprintf("%s: %s", Describe(worst.Target), worst.Message)
	if n := len(results); n > 1 {
		c.Message = fmt.Sprintf("%d objects' webhooks call this Service; the worst: %s", n, c.Message)
	}
	if len(c.Message) > maxMessage {
		c.Message = c.Message[:maxMessage-3] + "..."
	}
	return c
}

// maxMessage bounds a condition's message well below the API's 32 KiB.
const maxMessage = 1024

// byService groups results by the Service their slot names ("<namespace>/<name>").
func byService(results []TargetResult) map[types.NamespacedName][]TargetResult {
	out := map[types.NamespacedName][]TargetResult{}
	for _, r := range results {
		k := types.NamespacedName{Namespace: r.Target.Service.Namespace, Name: r.Target.Service.Name}
		out[k] = append(out[k], r)
	}
	return out
}

// changedServices are the Services whose Serving condition before and after differ: named only in one
// of them, or naming another worst finding. Only their requests are written again, so that a round of
// probes that changes nothing writes nothing and queues nothing.
func changedServices(before, after map[types.NamespacedName][]TargetResult) map[types.NamespacedName]bool {
	out := map[types.NamespacedName]bool{}
	for svc, rs := range after {
		old, ok := before[svc]
		if !ok || !same(ptr.To(ServingCondition(old, 0)), ptr.To(ServingCondition(rs, 0))) {
			out[svc] = true
		}
	}
	for svc := range before {
		if _, ok := after[svc]; !ok {
			out[svc] = true
		}
	}
	return out
}

// queueRequests queues a Serving condition write for every ServingCertRequest whose Service is one of
// services (see changedServices). A request created or changed later is queued by its own event.
func (c *Controller) queueRequests(services map[types.NamespacedName]bool) {
	if c.requests == nil || len(services) == 0 {
		return
	}
	namespaces := map[string]bool{}
	for svc := range services {
		namespaces[svc.Namespace] = true
	}
	for ns := range namespaces {
		reqs, err := c.requests.ServingCertRequests(ns).List(labels.Everything())
		if err != nil {
			continue
		}
		for _, r := range reqs {
			if services[types.NamespacedName{Namespace: ns, Name: r.Spec.ServiceName}] {
				c.queue.Add(key{job: jobRequest, request: types.NamespacedName{Namespace: ns, Name: r.Name}})
			}
		}
	}
}

// writeServing brings the Serving condition of the ServingCertRequest req up to date with the published
// results: set while a checked slot names its Service, removed when none does. It writes only a change.
func (c *Controller) writeServing(ctx context.Context, req types.NamespacedName) error {
	obj, err := c.requests.ServingCertRequests(req.Namespace).Get(req.Name)
	if err != nil {
		return nil // deleted: nothing to report on
	}
	c.mu.Lock()
	results := c.byService[types.NamespacedName{Namespace: req.Namespace, Name: obj.Spec.ServiceName}]
	c.mu.Unlock()
	var want *metav1.Condition
	if len(results) > 0 {
		cond := ServingCondition(results, obj.Generation)
		want = &cond
	}
	have := meta.FindStatusCondition(obj.Status.Conditions, certapiv1alpha1.ConditionServing)
	if same(have, want) {
		return nil
	}
	err = c.o.Requests.UpdateStatus(ctx, req, func(o *certapiv1alpha1.ServingCertRequest) bool {
		if want == nil {
			return meta.RemoveStatusCondition(&o.Status.Conditions, certapiv1alpha1.ConditionServing)
		}
		return meta.SetStatusCondition(&o.Status.Conditions, *want)
	})
	if err != nil {
		return fmt.Errorf("writing the Serving condition: %w", err)
	}
	return nil
}

// same reports whether the condition a request has is the one wanted (both absent counts).
func same(have, want *metav1.Condition) bool {
	if have == nil || want == nil {
		return have == nil && want == nil
	}
	return have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message && have.ObservedGeneration == want.ObservedGeneration
}
