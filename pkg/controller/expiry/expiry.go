// Package expiry publishes, on the leader, the notAfter and renewal time of every ServingCertRequest's
// latest certificate as metrics, from the term's informer: a series appears when a certificate is first
// recorded in status, follows each renewal, and goes away with the request, so alerts never fire for a
// request that no longer exists and the series cannot grow without bound. A replica that stops leading
// drops them all: only the leader publishes them.
package expiry

import (
	"context"
	"errors"
	"fmt"

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
}

// New registers the ServingCertRequest informer of the term.
func New(cc *controller.Context) (*Publisher, error) {
	if cc == nil {
		return nil, errors.New("expiry: a controller Context is required")
	}
	return &Publisher{informer: cc.CertapiInformers.Certapi().V1alpha1().ServingCertRequests().Informer()}, nil
}

// Run publishes until ctx ends, then drops every series it published.
func (p *Publisher) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	reg, err := p.informer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
		DeleteFunc: forget,
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return fmt.Errorf("watching ServingCertRequests: %w", err)
	}
	defer func() { _ = p.informer.RemoveEventHandler(reg) }()
	<-ctx.Done()
	metrics.CertificateNotAfter.Reset()
	metrics.CertificateRenewal.Reset()
	return nil
}

func observe(obj any) {
	r, ok := obj.(*certapiv1alpha1.ServingCertRequest)
	if !ok || r.Status.NotAfter == nil || r.Status.RenewalTime == nil {
		return
	}
	metrics.ObserveCertificate(r.Namespace, r.Name, r.Status.NotAfter.Time, r.Status.RenewalTime.Time)
}

func forget(obj any) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		return
	}
	metrics.ForgetCertificate(key.Namespace, key.Name)
}
