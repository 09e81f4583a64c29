// Package expiry publishes, on the leader, the notAfter and renewal time of every ServingCertRequest's
// latest certificate as metrics, with who renews it, and every request's Ready condition, from the
// term's informer: a certificate's series appear when it is first recorded in status and follow each
// renewal, the Ready series from the request's creation; all go away with the request, so alerts never
// fire for a request that no longer exists and the series cannot grow without bound. A replica that
// stops leading drops them all (metrics.ForgetTerm, once the term's handlers are removed): only the
// leader publishes them.
//
// It is only a handler of the term's informer: it has no queue and nothing to run.
package expiry

import (
	"errors"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/metrics"
)

// Publisher keeps the certificate expiry metrics in step with the ServingCertRequests. Make one per
// leadership term with New.
type Publisher struct {
	mu sync.Mutex
	// reasons holds the reason label of each request's Ready series, to replace it when the reason changes.
	reasons map[types.NamespacedName]string
}

// New declares on the term's Context a handler of its ServingCertRequest informer that publishes the
// metrics for the term.
func New(cc *controller.Context) (*Publisher, error) {
	if cc == nil {
		return nil, errors.New("expiry: a controller Context is required")
	}
	p := &Publisher{reasons: map[types.NamespacedName]string{}}
	cc.Watch(cc.CertapiInformers.Certapi().V1alpha1().ServingCertRequests().Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    p.observe,
		UpdateFunc: func(_, obj any) { p.observe(obj) },
		DeleteFunc: p.forget,
	})
	return p, nil
}

func (p *Publisher) observe(obj any) {
	r, ok := obj.(*certapiv1alpha1.ServingCertRequest)
	if !ok {
		return
	}
	ready, reason := Readiness(r)
	key := types.NamespacedName{Namespace: r.Namespace, Name: r.Name}
	p.mu.Lock()
	previous, seen := p.reasons[key]
	if !seen {
		previous = reason
	}
	p.reasons[key] = reason
	metrics.ObserveReady(r.Namespace, r.Name, previous, reason, ready)
	p.mu.Unlock()
	if r.Status.NotAfter == nil || r.Status.RenewalTime == nil {
		return
	}
	metrics.ObserveCertificate(r.Namespace, r.Name, Renewer(r), r.Status.NotAfter.Time, r.Status.RenewalTime.Time)
}

func (p *Publisher) forget(obj any) {
	name, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		return
	}
	key := types.NamespacedName{Namespace: name.Namespace, Name: name.Name}
	metrics.ForgetCertificate(key.Namespace, key.Name)
	p.mu.Lock()
	defer p.mu.Unlock()
	if reason, ok := p.reasons[key]; ok {
		metrics.ForgetReady(key.Namespace, key.Name, reason)
		delete(p.reasons, key)
	}
}

// Readiness is what the Ready series of r says: whether its Ready condition is True, and the condition's
// reason (empty while r has no Ready condition: no certificate yet).
func Readiness(r *certapiv1alpha1.ServingCertRequest) (bool, string) {
	c := meta.FindStatusCondition(r.Status.Conditions, certapiv1alpha1.ConditionReady)
	if c == nil {
		return false, ""
	}
	return c.Status == metav1.ConditionTrue, c.Reason
}

// Renewer is who renews r's certificate: certapi when r has spec.secretName, else its servingcerts client.
func Renewer(r *certapiv1alpha1.ServingCertRequest) string {
	if r.Spec.SecretName != "" {
		return metrics.RenewerCertapi
	}
	return metrics.RenewerClient
}
