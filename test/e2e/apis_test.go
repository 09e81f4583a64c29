package e2e

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestServedAPIsAreReported: certapi finds out through discovery which of the certificates.k8s.io/v1 APIs
// it uses kube-apiserver serves (ClusterTrustBundles and PodCertificateRequests, GA in Kubernetes 1.37),
// runs everything else without the missing ones, and says what is off and why: in
// CertificateAuthority/default's APIsServed condition, in certapi_kube_api_served and in `kubectl certapi
// status`. On 1.37 everything is served; `make test-matrix` runs this on the older minors, where the
// condition is False and names each missing API, the minor that serves it, and what certapi leaves off.
func TestServedAPIsAreReported(t *testing.T) {
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	apis := []struct{ name, resource, off string }{
		{"ClusterTrustBundle", "clustertrustbundles", "no ClusterTrustBundle is published"},
		{"PodCertificateRequest", "podcertificaterequests", "signer certapi.dev/serving answers no PodCertificateRequest"},
	}
	served := map[string]bool{}
	var version string
	for _, a := range apis {
		served[a.name], version = testhelpers.Served(t, cp.AdminConfig, "certificates.k8s.io/v1", a.resource)
	}
	all := served["ClusterTrustBundle"] && served["PodCertificateRequest"]

	var cond *metav1.Condition
	e2etest.Eventually(t, 30*time.Second, "CertificateAuthority/default's APIsServed condition", func(ctx context.Context) (bool, error) {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		cond = meta.FindStatusCondition(ca.Status.Conditions, certapiv1alpha1.ConditionAPIsServed)
		return cond != nil, nil
	})
	wantStatus, wantReason := metav1.ConditionFalse, certapiv1alpha1.APIsServedReasonNotServed
	if all {
		wantStatus, wantReason = metav1.ConditionTrue, certapiv1alpha1.APIsServedReasonAllServed
	}
	if cond.Status != wantStatus || cond.Reason != wantReason {
		t.Errorf("APIsServed %s (%s): %q; kube-apiserver %s serves ClusterTrustBundles %v, PodCertificateRequests %v",
			cond.Status, cond.Reason, cond.Message, version, served["ClusterTrustBundle"], served["PodCertificateRequest"])
	}
	if !strings.Contains(cond.Message, "kube-apiserver "+version) {
		t.Errorf("APIsServed %q does not name kube-apiserver %s", cond.Message, version)
	}
	for _, a := range apis {
		says := strings.Contains(cond.Message, "serves no certificates.k8s.io/v1 "+a.resource+" (Kubernetes 1.37 or later does): "+a.off)
		if says == served[a.name] {
			t.Errorf("APIsServed %q: says %s is off: %v; kube-apiserver %s serves it: %v", cond.Message, a.name, says, version, served[a.name])
		}
	}

	// The leader's log says the same, and what needs no missing API runs: a ServingCertRequest gets its
	// Secret.
	for _, a := range apis {
		line := "serves no certificates.k8s.io/v1 " + a.resource + " (Kubernetes 1.37 or later does): " + a.off
		if logged := logContains(t, cp.Logs()["certapi"], line); logged == served[a.name] {
			t.Errorf("certapi's log says %q: %v; kube-apiserver %s serves %s: %v", line, logged, version, a.resource, served[a.name])
		}
	}
	ns := e2etest.Namespace(t, kube)
	deliveredRequest(t, c, kube, ns, "apis")

	client, err := cp.CertapiHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 30*time.Second, "certapi_kube_api_served for both APIs", func(ctx context.Context) (bool, error) {
		resp, err := client.Get(cp.CertapiURL + "/metrics")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, nil
		}
		for _, a := range apis {
			want := `certapi_kube_api_served{api="` + a.name + `"} 0`
			if served[a.name] {
				want = `certapi_kube_api_served{api="` + a.name + `"} 1`
			}
			if !strings.Contains(string(body), want) {
				return false, nil
			}
		}
		return true, nil
	})

	run := newPluginRunner(t, buildPluginNamed(t, "kubectl-certapi")).kubectl
	out := run("certapi", "status").succeeded(t).stdout
	want := "Kubernetes APIs: " + cond.Message
	if !all {
		want = "Kubernetes APIs: not all served: " + cond.Message
	}
	if !strings.Contains(out, want) {
		t.Errorf("kubectl certapi status lacks %q:\n%s", want, out)
	}
}
