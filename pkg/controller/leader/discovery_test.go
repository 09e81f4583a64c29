package leader

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// TestDecideAPIs: the leader runs a loop only when kube-apiserver serves its certificates.k8s.io/v1 API,
// and the APIsServed condition names what is missing, the Kubernetes minor that serves it, and what is off.
func TestDecideAPIs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		served  map[string]bool
		version string
		wantOn  map[string]bool
		status  metav1.ConditionStatus
		reason  string
		says    []string
		never   []string
	}{
		{
			name:    "Kubernetes 1.37 serves both",
			served:  map[string]bool{"certificatesigningrequests": true, "clustertrustbundles": true, "podcertificaterequests": true},
			version: "v1.37.2",
			wantOn:  map[string]bool{"ClusterTrustBundle": true, "PodCertificateRequest": true},
			status:  metav1.ConditionTrue, reason: certapiv1alpha1.APIsServedReasonAllServed,
			says:  []string{"kube-apiserver v1.37.2 serves every API certapi uses"},
			never: []string{"serves no"},
		},
		{
			name:    "Kubernetes 1.33 serves neither in v1",
			served:  map[string]bool{"certificatesigningrequests": true},
			version: "v1.33.7",
			wantOn:  map[string]bool{"ClusterTrustBundle": false, "PodCertificateRequest": false},
			status:  metav1.ConditionFalse, reason: certapiv1alpha1.APIsServedReasonNotServed,
			says: []string{
				"kube-apiserver v1.33.7 serves no certificates.k8s.io/v1 clustertrustbundles (Kubernetes 1.37 or later does): no ClusterTrustBundle is published",
				"kube-apiserver v1.33.7 serves no certificates.k8s.io/v1 podcertificaterequests (Kubernetes 1.37 or later does): signer certapi.dev/serving answers no PodCertificateRequest",
				"; everything else runs",
			},
		},
		{
			name:   "certificates.k8s.io/v1 not served at all, version unknown",
			served: map[string]bool{},
			wantOn: map[string]bool{"ClusterTrustBundle": false, "PodCertificateRequest": false},
			status: metav1.ConditionFalse, reason: certapiv1alpha1.APIsServedReasonNotServed,
			says:  []string{"kube-apiserver serves no certificates.k8s.io/v1 clustertrustbundles"},
			never: []string{"kube-apiserver  "},
		},
		{
			name:    "only ClusterTrustBundles",
			served:  map[string]bool{"clustertrustbundles": true},
			version: "v1.36.3",
			wantOn:  map[string]bool{"ClusterTrustBundle": true, "PodCertificateRequest": false},
			status:  metav1.ConditionFalse, reason: certapiv1alpha1.APIsServedReasonNotServed,
			says:  []string{"serves no certificates.k8s.io/v1 podcertificaterequests"},
			never: []string{"clustertrustbundles"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decideAPIs(tc.served, tc.version)
			for name, want := range tc.wantOn {
				if d.On[name] != want {
					t.Errorf("On[%s] = %v, want %v", name, d.On[name], want)
				}
			}
			var missing int
			for _, on := range tc.wantOn {
				if !on {
					missing++
				}
			}
			if len(d.Missing) != missing {
				t.Errorf("Missing %v, want %d of them", d.Missing, missing)
			}
			c := d.Condition
			if c.Type != certapiv1alpha1.ConditionAPIsServed || c.Status != tc.status || c.Reason != tc.reason {
				t.Errorf("condition %s %s %s, want %s %s %s", c.Type, c.Status, c.Reason, certapiv1alpha1.ConditionAPIsServed, tc.status, tc.reason)
			}
			for _, s := range tc.says {
				if !strings.Contains(c.Message, s) {
					t.Errorf("message %q does not say %q", c.Message, s)
				}
			}
			for _, s := range tc.never {
				if strings.Contains(c.Message, s) {
					t.Errorf("message %q says %q", c.Message, s)
				}
			}
		})
	}
}
