// Package expiry publishes, on the leader, the notAfter and renewal time of every ServingCertRequest's
// latest certificate as metrics, with who renews it, and every request's Ready condition, from the
// term's informer cache: the series are made when /metrics is scraped (metrics.RequestSource), so none
// is stored per request. A certificate's series appear once it is recorded in status and follow each
// renewal, the Ready series from the request's creation; all go away with the request, so alerts never
// fire for a request that no longer exists and the series cannot grow without bound. None are shown
// until the term's informer has synced, and a replica that stops leading shows none
// (metrics.ForgetTerm): only the leader publishes them.
//
// It has no handler, no queue and nothing to run.
package expiry

import (
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/metrics"
)

// Source is the metrics.RequestSource of one leadership term: the requests its informer holds.
type Source struct {
	store  cache.Store
	synced cache.InformerSynced
}

var _ metrics.RequestSource = &Source{}

// New makes the term's Source from the ServingCertRequest informer of cc and publishes it
// (metrics.PublishRequests) until the term ends (metrics.ForgetTerm).
func New(cc *controller.Context) (*Source, error) {
	if cc == nil {
		return nil, errors.New("expiry: a controller Context is required")
	}
	informer := cc.CertapiInformers.Certapi().V1alpha1().ServingCertRequests().Informer()
	s := &Source{store: informer.GetStore(), synced: informer.HasSynced}
	metrics.PublishRequests(s)
	return s, nil
}

// EachRequest calls f with the series of each request in the informer's cache; with none until the
// informer has synced.
func (s *Source) EachRequest(f func(metrics.Request)) {
	if !s.synced() {
		return
	}
	for _, obj := range s.store.List() {
		if r, ok := obj.(*certapiv1alpha1.ServingCertRequest); ok {
			f(Series(r))
		}
	}
}

// Series is what r's series say.
func Series(r *certapiv1alpha1.ServingCertRequest) metrics.Request {
	ready, reason := Readiness(r)
	m := metrics.Request{Namespace: r.Namespace, Name: r.Name, Ready: ready, Reason: reason}
	if r.Status.NotAfter != nil && r.Status.RenewalTime != nil {
		m.Certificate = true
		m.Renewer = Renewer(r)
		m.NotAfter = r.Status.NotAfter.Time
		m.Renewal = r.Status.RenewalTime.Time
	}
	return m
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
