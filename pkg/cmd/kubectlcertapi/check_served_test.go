package kubectlcertapi

import (
	"bytes"
	"strings"
	"testing"

	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// TestCheckServedCertificates: check lists the injected webhooks that would fail as a warning, which
// leaves certapi's own readiness (and check --wait) alone, and says nothing while the check is off.
func TestCheckServedCertificates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		served  *certapiv1alpha1.ServedSummary
		line    string // "" when check has no served line
		warning bool
		detail  []string
	}{
		{name: "check off or not run yet"},
		{name: "all verified", served: &certapiv1alpha1.ServedSummary{Targets: 3, Verified: 3}, line: "ok",
			detail: []string{"every one of the 3"}},
		{name: "some would fail", served: &certapiv1alpha1.ServedSummary{Targets: 14, Verified: 2, Untrusted: 12,
			WorstTargets: []string{"ValidatingWebhookConfiguration v webhook a.example.com: Untrusted", "APIService v1.example.com: Untrusted"}},
			line: "WARNING", warning: true,
			detail: []string{"12 of 14", "ValidatingWebhookConfiguration v webhook a.example.com: Untrusted, APIService v1.example.com: Untrusted and 10 more", "status.served"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := CheckInput{APIService: &apiregistrationv1.APIService{},
				CA: &certapiv1alpha1.CertificateAuthority{Status: certapiv1alpha1.CertificateAuthorityStatus{Served: tc.served}}}
			var got *CheckResult
			results := Check(in)
			for i := range results {
				if results[i].Name == checkServed {
					got = &results[i]
				}
			}
			if tc.line == "" {
				if got != nil {
					t.Fatalf("a served line without status.served: %+v", *got)
				}
				return
			}
			if got == nil {
				t.Fatal("no served line")
			}
			if !got.OK || got.Warning != tc.warning {
				t.Errorf("ok %v warning %v, want ok and warning %v", got.OK, got.Warning, tc.warning)
			}
			for _, d := range tc.detail {
				if !strings.Contains(got.Detail, d) {
					t.Errorf("detail %q lacks %q", got.Detail, d)
				}
			}
			var out bytes.Buffer
			if err := PrintChecks(&out, results); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "served certificates   "+tc.line) {
				t.Errorf("printed:\n%s", out.String())
			}
			for _, name := range failing(results) {
				if name == checkServed {
					t.Error("a served warning counts as a failed check")
				}
			}
		})
	}
}
