package metrics

import (
	"strings"
	"testing"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
)

// TestRequestSeries checks that a request's series follow what is observed: one Ready series whatever
// its reason did before, certificate series under one renewer, and nothing left once it is forgotten.
func TestRequestSeries(t *testing.T) {
	Register()
	at := time.Unix(1000, 0)
	const help = `
# HELP certapi_servingcertrequest_ready [ALPHA] 1 when the ServingCertRequest's Ready condition is True, else 0, from its creation on (before its first certificate too); reason is the condition's, empty while it has none (leader only).
# TYPE certapi_servingcertrequest_ready gauge
# HELP certapi_certificate_renewal_timestamp_seconds [ALPHA] Renewal time of the latest certificate issued for each ServingCertRequest, in Unix seconds; renewer is certapi (spec.secretName) or client (servingcerts) (leader only).
# TYPE certapi_certificate_renewal_timestamp_seconds gauge
`
	for _, tc := range []struct {
		name    string
		observe func()
		want    string // series after observe, without the HELP and TYPE lines
	}{
		{
			name:    "created, no condition yet",
			observe: func() { ObserveReady("ns", "web", "", "", false) },
			want:    `certapi_servingcertrequest_ready{name="web",namespace="ns",reason=""} 0`,
		},
		{
			name:    "pending, the reason replaces the empty one",
			observe: func() { ObserveReady("ns", "web", "", "Pending", false) },
			want:    `certapi_servingcertrequest_ready{name="web",namespace="ns",reason="Pending"} 0`,
		},
		{
			name: "issued by certapi into a Secret",
			observe: func() {
				ObserveReady("ns", "web", "Pending", "Issued", true)
				ObserveCertificate("ns", "web", RenewerCertapi, at.Add(time.Hour), at)
			},
			want: `certapi_certificate_renewal_timestamp_seconds{name="web",namespace="ns",renewer="certapi"} 1000
certapi_servingcertrequest_ready{name="web",namespace="ns",reason="Issued"} 1`,
		},
		{
			name:    "secretName removed: the client renews now",
			observe: func() { ObserveCertificate("ns", "web", RenewerClient, at.Add(time.Hour), at.Add(time.Minute)) },
			want: `certapi_certificate_renewal_timestamp_seconds{name="web",namespace="ns",renewer="client"} 1060
certapi_servingcertrequest_ready{name="web",namespace="ns",reason="Issued"} 1`,
		},
		{
			name: "deleted",
			observe: func() {
				ForgetCertificate("ns", "web")
				ForgetReady("ns", "web", "Issued")
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.observe()
			want := ""
			if tc.want != "" {
				want = help + tc.want + "\n"
			}
			if err := testutil.GatherAndCompare(legacyregistry.DefaultGatherer, strings.NewReader(want),
				"certapi_servingcertrequest_ready", "certapi_certificate_renewal_timestamp_seconds"); err != nil {
				t.Error(err)
			}
		})
	}
}
