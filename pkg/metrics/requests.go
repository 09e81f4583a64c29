package metrics

import (
	"sync/atomic"
	"time"

	"k8s.io/component-base/metrics"
)

// The per-request series (kube-state-metrics style): no gauge is stored per ServingCertRequest. When
// /metrics is scraped, the collector asks the leader's RequestSource for the requests it holds (its
// informer's cache) and builds each series from them, so a request's series exist exactly while the
// leader's cache holds the request, and cost nothing between scrapes.
var (
	// certificateNotAfterDesc is the notAfter of the latest certificate issued for each request (Unix
	// seconds), with who renews it (renewer: RenewerCertapi or RenewerClient).
	certificateNotAfterDesc = metrics.NewDesc(metrics.BuildFQName(namespace, "", "certificate_not_after_timestamp_seconds"),
		"notAfter of the latest certificate issued for each ServingCertRequest, in Unix seconds; renewer is certapi (spec.secretName: certapi renews the Secret) or client (the workload renews through servingcerts) (leader only).",
		[]string{"namespace", "name", "renewer"}, nil, metrics.ALPHA, "")

	// certificateRenewalDesc is the renewal time of the latest certificate issued for each request (Unix
	// seconds), with who renews it. Only certapi's own renewals can be called overdue from the server's
	// side: a client that stops calling servingcerts may simply be gone.
	certificateRenewalDesc = metrics.NewDesc(metrics.BuildFQName(namespace, "", "certificate_renewal_timestamp_seconds"),
		"Renewal time of the latest certificate issued for each ServingCertRequest, in Unix seconds; renewer is certapi (spec.secretName) or client (servingcerts) (leader only).",
		[]string{"namespace", "name", "renewer"}, nil, metrics.ALPHA, "")

	// servingCertRequestReadyDesc is 1 for each request whose Ready condition is True, else 0, with the
	// condition's reason. It exists from the request's creation, before any certificate, so that an alert
	// can find a request that never became Ready.
	servingCertRequestReadyDesc = metrics.NewDesc(metrics.BuildFQName(namespace, "", "servingcertrequest_ready"),
		"1 when the ServingCertRequest's Ready condition is True, else 0, from its creation on (before its first certificate too); reason is the condition's, empty while it has none (leader only).",
		[]string{"namespace", "name", "reason"}, nil, metrics.ALPHA, "")
)

// Request is what the series of one ServingCertRequest say.
type Request struct {
	Namespace, Name string
	// Ready is whether its Ready condition is True; Reason is the condition's reason, empty while it has
	// no Ready condition.
	Ready  bool
	Reason string
	// Certificate is whether its status records a certificate (notAfter and renewal time): only then
	// does it have certificate series, with Renewer (RenewerCertapi or RenewerClient), NotAfter and
	// Renewal.
	Certificate       bool
	Renewer           string
	NotAfter, Renewal time.Time
}

// RequestSource lists the ServingCertRequests whose series /metrics shows, each time it is scraped.
type RequestSource interface {
	// EachRequest calls f once for each request, from the scraping goroutine. It calls it for none
	// while it does not hold them all (an informer that has not synced yet).
	EachRequest(f func(Request))
}

// sourceHolder boxes a RequestSource for an atomic.Pointer.
type sourceHolder struct{ RequestSource }

// requestCollector makes the per-request series from the published RequestSource at each scrape.
type requestCollector struct {
	metrics.BaseStableCollector
	source atomic.Pointer[sourceHolder]
}

var requests = &requestCollector{}

var _ metrics.StableCollector = requests

// DescribeWithStability sends the descriptions of the per-request series.
func (c *requestCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- certificateNotAfterDesc
	ch <- certificateRenewalDesc
	ch <- servingCertRequestReadyDesc
}

// CollectWithStability sends the series of every request the source holds; none without a source.
func (c *requestCollector) CollectWithStability(ch chan<- metrics.Metric) {
	h := c.source.Load()
	if h == nil {
		return
	}
	h.EachRequest(func(r Request) {
		ready := 0.0
		if r.Ready {
			ready = 1
		}
		ch <- metrics.NewLazyConstMetric(servingCertRequestReadyDesc, metrics.GaugeValue, ready, r.Namespace, r.Name, r.Reason)
		if !r.Certificate {
			return
		}
		ch <- metrics.NewLazyConstMetric(certificateNotAfterDesc, metrics.GaugeValue, float64(r.NotAfter.Unix()), r.Namespace, r.Name, r.Renewer)
		ch <- metrics.NewLazyConstMetric(certificateRenewalDesc, metrics.GaugeValue, float64(r.Renewal.Unix()), r.Namespace, r.Name, r.Renewer)
	})
}

// PublishRequests makes s the source of the per-request series (the leader's, for its term) until
// ForgetTerm.
func PublishRequests(s RequestSource) {
	if s == nil {
		requests.source.Store(nil)
		return
	}
	requests.source.Store(&sourceHolder{s})
}
