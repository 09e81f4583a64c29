package metrics

import (
	"sync/atomic"
	"time"

	"k8s.io/component-base/metrics"
)

// The per-target series of the served certificate check (pkg/controller/servedcert), made at scrape time
// from the leader's last results like the per-request series: nothing is stored per target between
// scrapes, and a target's series exist exactly while the check holds a result for it.
var (
	// servedTargetDesc is 1 for each injected caBundle slot that names a Service, with the state of its
	// worst endpoint.
	servedTargetDesc = metrics.NewDesc(metrics.BuildFQName(namespace, "", "served_certificate_target"),
		"1 for each injected webhook, conversion webhook and APIService, with what its Service's endpoints serve as kube-apiserver would judge it (state of the worst endpoint: Verified, ExpiringSoon, NoEndpoints, Unreachable, HandshakeFailed, NameMismatch, Expired, Untrusted); webhook is the webhook's name in a webhook configuration, empty otherwise (leader only).",
		[]string{"kind", "name", "webhook", "state"}, nil, metrics.ALPHA, "")

	// servedNotAfterDesc is the notAfter of the certificate each endpoint presents (Unix seconds), for an
	// alert on a server that will expire before it reloads a renewed certificate.
	servedNotAfterDesc = metrics.NewDesc(metrics.BuildFQName(namespace, "", "served_certificate_not_after_timestamp_seconds"),
		"notAfter of the certificate each endpoint of an injected webhook, conversion webhook or APIService presents, in Unix seconds (leader only).",
		[]string{"kind", "name", "webhook", "endpoint"}, nil, metrics.ALPHA, "")
)

// ServedTarget is what the series of one checked slot say.
type ServedTarget struct {
	Kind, Name, Webhook string
	// State is the state of its worst endpoint.
	State string
	// Endpoints are the endpoints whose certificate was seen, with its notAfter.
	Endpoints []ServedEndpoint
}

// ServedEndpoint is one endpoint's presented certificate.
type ServedEndpoint struct {
	Address  string
	NotAfter time.Time
}

// ServedSource lists the checked slots whose series /metrics shows, each time it is scraped.
type ServedSource interface {
	// EachServed calls f once for each slot, from the scraping goroutine.
	EachServed(f func(ServedTarget))
}

type servedHolder struct{ ServedSource }

// servedCollector makes the per-target series from the published ServedSource at each scrape.
type servedCollector struct {
	metrics.BaseStableCollector
	source atomic.Pointer[servedHolder]
}

var served = &servedCollector{}

var _ metrics.StableCollector = served

// DescribeWithStability sends the descriptions of the per-target series.
func (c *servedCollector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- servedTargetDesc
	ch <- servedNotAfterDesc
}

// CollectWithStability sends the series of every slot the source holds; none without a source.
func (c *servedCollector) CollectWithStability(ch chan<- metrics.Metric) {
	h := c.source.Load()
	if h == nil {
		return
	}
	h.EachServed(func(t ServedTarget) {
		ch <- metrics.NewLazyConstMetric(servedTargetDesc, metrics.GaugeValue, 1, t.Kind, t.Name, t.Webhook, t.State)
		for _, e := range t.Endpoints {
			ch <- metrics.NewLazyConstMetric(servedNotAfterDesc, metrics.GaugeValue, float64(e.NotAfter.Unix()), t.Kind, t.Name, t.Webhook, e.Address)
		}
	})
}

// PublishServed makes s the source of the per-target served series (the leader's, for its term) until
// ForgetTerm or PublishServed(nil).
func PublishServed(s ServedSource) {
	if s == nil {
		served.source.Store(nil)
		return
	}
	served.source.Store(&servedHolder{s})
}
