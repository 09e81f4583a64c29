package metrics

import (
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
)

type servedSource []ServedTarget

func (s servedSource) EachServed(f func(ServedTarget)) {
	for _, t := range s {
		f(t)
	}
}

// TestServedSeries checks that the per-target served series are made from the published source at each
// scrape, and that none are left once the term is over.
func TestServedSeries(t *testing.T) {
	Register()
	t.Cleanup(func() { PublishServed(nil) })
	const help = `# HELP certapi_served_certificate_target [ALPHA] 1 for each injected webhook, conversion webhook and APIService, with what its Service's endpoints serve as kube-apiserver would judge it (state of the worst endpoint: Verified, ExpiringSoon, NoEndpoints, Unreachable, HandshakeFailed, NameMismatch, Expired, Untrusted); webhook is the webhook's name in a webhook configuration, empty otherwise (leader only).
# TYPE certapi_served_certificate_target gauge
`
	const notAfterHelp = `# HELP certapi_served_certificate_not_after_timestamp_seconds [ALPHA] notAfter of the certificate each endpoint of an injected webhook, conversion webhook or APIService presents, in Unix seconds (leader only).
# TYPE certapi_served_certificate_not_after_timestamp_seconds gauge
`
	PublishServed(servedSource{
		{Kind: "ValidatingWebhookConfiguration", Name: "vwc", Webhook: "v.example.com", State: "Untrusted",
			Endpoints: []ServedEndpoint{{Address: "10.0.0.1:8443", NotAfter: time.Unix(5000, 0)}}},
		{Kind: "APIService", Name: "v1.example.com", State: "NoEndpoints"},
	})
	want := notAfterHelp + `certapi_served_certificate_not_after_timestamp_seconds{endpoint="10.0.0.1:8443",kind="ValidatingWebhookConfiguration",name="vwc",webhook="v.example.com"} 5000
` + help + `certapi_served_certificate_target{kind="APIService",name="v1.example.com",state="NoEndpoints",webhook=""} 1
certapi_served_certificate_target{kind="ValidatingWebhookConfiguration",name="vwc",state="Untrusted",webhook="v.example.com"} 1
`
	names := []string{"certapi_served_certificate_target", "certapi_served_certificate_not_after_timestamp_seconds"}
	if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	ForgetTerm()
	if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(""), names...); err != nil {
		t.Errorf("after ForgetTerm: %v", err)
	}
}
