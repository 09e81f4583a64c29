package metrics

import (
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
)

// fakeSource holds the requests a test publishes; synced false is an informer still listing.
type fakeSource struct {
	requests []Request
	synced   bool
}

func (s *fakeSource) EachRequest(f func(Request)) {
	if !s.synced {
		return
	}
	for _, r := range s.requests {
		f(r)
	}
}

// TestRequestSeries checks that the per-request series are made from the published source at each
// scrape: the Ready series of every request it holds (1 or 0, with the condition's reason), the
// certificate series of those with a certificate, and nothing for a request it no longer holds, before
// its informer synced, or once the term is over.
func TestRequestSeries(t *testing.T) {
	Register()
	t.Cleanup(func() { PublishRequests(nil) })
	at := time.Unix(1000, 0)
	const help = `
# HELP certapi_servingcertrequest_ready [ALPHA] 1 when the ServingCertRequest's Ready condition is True, else 0, from its creation on (before its first certificate too); reason is the condition's, empty while it has none (leader only).
# TYPE certapi_servingcertrequest_ready gauge
`
	const certHelp = `# HELP certapi_certificate_not_after_timestamp_seconds [ALPHA] notAfter of the latest certificate issued for each ServingCertRequest, in Unix seconds; renewer is certapi (spec.secretName: certapi renews the Secret) or client (the workload renews through servingcerts) (leader only).
# TYPE certapi_certificate_not_after_timestamp_seconds gauge
`
	const renewalHelp = `# HELP certapi_certificate_renewal_timestamp_seconds [ALPHA] Renewal time of the latest certificate issued for each ServingCertRequest, in Unix seconds; renewer is certapi (spec.secretName) or client (servingcerts) (leader only).
# TYPE certapi_certificate_renewal_timestamp_seconds gauge
`
	issued := Request{Namespace: "ns", Name: "web", Ready: true, Reason: "Issued",
		Certificate: true, Renewer: RenewerCertapi, NotAfter: at.Add(time.Hour), Renewal: at}
	for _, tc := range []struct {
		name   string
		source RequestSource // published before the scrape; nil: ForgetTerm
		want   string        // the series, without the HELP and TYPE lines of the Ready series
	}{
		{
			name:   "created, no condition yet",
			source: &fakeSource{synced: true, requests: []Request{{Namespace: "ns", Name: "web"}}},
			want:   help + `certapi_servingcertrequest_ready{name="web",namespace="ns",reason=""} 0` + "\n",
		},
		{
			name:   "not ready, with the condition's reason",
			source: &fakeSource{synced: true, requests: []Request{{Namespace: "ns", Name: "web", Reason: "SecretConflict"}}},
			want:   help + `certapi_servingcertrequest_ready{name="web",namespace="ns",reason="SecretConflict"} 0` + "\n",
		},
		{
			name:   "ready, with its certificate",
			source: &fakeSource{synced: true, requests: []Request{issued, {Namespace: "other", Name: "new", Reason: "Pending"}}},
			want: certHelp + `certapi_certificate_not_after_timestamp_seconds{name="web",namespace="ns",renewer="certapi"} 4600
` + renewalHelp + `certapi_certificate_renewal_timestamp_seconds{name="web",namespace="ns",renewer="certapi"} 1000` + help +
				`certapi_servingcertrequest_ready{name="new",namespace="other",reason="Pending"} 0
certapi_servingcertrequest_ready{name="web",namespace="ns",reason="Issued"} 1` + "\n",
		},
		{
			name:   "deleted: the source no longer holds it",
			source: &fakeSource{synced: true, requests: []Request{{Namespace: "other", Name: "new", Reason: "Pending"}}},
			want:   help + `certapi_servingcertrequest_ready{name="new",namespace="other",reason="Pending"} 0` + "\n",
		},
		{
			name:   "informer not synced yet",
			source: &fakeSource{requests: []Request{issued}},
		},
		{
			name: "term over",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.source == nil {
				PublishRequests(&fakeSource{synced: true, requests: []Request{issued}})
				ForgetTerm()
			} else {
				PublishRequests(tc.source)
			}
			if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(tc.want),
				"certapi_servingcertrequest_ready", "certapi_certificate_not_after_timestamp_seconds",
				"certapi_certificate_renewal_timestamp_seconds"); err != nil {
				t.Error(err)
			}
		})
	}
}
