// Package expiry publishes, on the leader, the notAfter and renewal time of every ServingCertRequest's
// latest certificate as metrics, with who renews it, and every request's Ready condition, from the
// term's informer: a certificate's series appear when it is first recorded in status and follow each
// renewal, the Ready series from the request's creation; all go away with the request, so alerts never
// fire for a request that no longer exists and the series cannot grow without bound. A replica that
// stops leading drops them all: only the leader publishes them.
package expiry

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/metrics"
)

// Publisher keeps the certificate expiry metrics in step with the ServingCertRequests. Make one per
// leadership term with New and call Run once.
type Publisher struct {
	informer cache.SharedIndexInformer

	mu sync.Mutex
	// reasons holds the reason label of each request's Ready series, to replace it when the reason changes.
	reasons map[types.NamespacedName]string
}

// New registers the ServingCertRequest informer of the term.
func New(cc *controller.Context) (*Publisher, error) {
	if cc == nil {
		return nil, errors.New("expiry: a controller Context is required")
	}
	return &Publisher{
		informer: cc.CertapiInformers.Certapi().V1alpha1().ServingCertRequests().Informer(),
		reasons:  map[types.NamespacedName]string{},
	}, nil
}

// Run publishes until ctx ends, then drops every series it published.
func (p *Publisher) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	reg, err := p.informer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.observe,
		UpdateFunc: func(_, obj any) { p.observe(obj) },
		DeleteFunc: p.forget,
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return fmt.Errorf("watching ServingCertRequests: %w", err)
	}
	defer func() { _ = p.informer.RemoveEventHandler(reg) }()
	<-ctx.Done()
	metrics.CertificateNotAfter.Reset()
	metrics.CertificateRenewal.Reset()
	p.mu.Lock()
	defer p.mu.Unlock()
	metrics.ServingCertRequestReady.Reset()
	clear(p.reasons)
	return nil
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
