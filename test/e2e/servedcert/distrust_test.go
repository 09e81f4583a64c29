package servedcert

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cmd/kubectlcertapi"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestDistrustWaitsForServedEndpoints: a distrust does not take the distrusted CA out of the bundles
// while a webhook's endpoint still presents a certificate of it that the bundle verifies (kube-apiserver's
// calls to it would fail from that moment): `kubectl certapi distrust` names the endpoint before it asks,
// status.distrust.pendingEndpoints names it while the rest of the distrust is done, and the distrust
// completes once the server presents a certificate of the new CA, which the check sees with no API event.
func TestDistrustWaitsForServedEndpoints(t *testing.T) {
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	srv := testhelpers.ServeTLS(t, host, testhelpers.CertFromCertapi(t, c, ns, "moving"))
	testhelpers.SelectorlessService(t, kube, ns, "moving", srv.Addr, true)
	testhelpers.InjectedWebhook(t, kube, ns, "moving", webhookDomain)
	waitServing(t, ns, "moving", metav1.ConditionTrue, "Verified", 60*time.Second)
	endpoint := "ValidatingWebhookConfiguration " + ns + "-moving webhook moving.served.e2e.certapi.dev: " + srv.Addr

	// Before it asks, distrust says which endpoints present a certificate of the CAs it would distrust.
	var plan string
	e2etest.Eventually(t, 30*time.Second, "the distrust plan naming the webhook's endpoint", func(ctx context.Context) (bool, error) {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		plan = kubectlcertapi.DistrustPlan(ca)
		return strings.Contains(plan, endpoint), nil
	})
	t.Logf("the plan:\n%s", plan)

	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.Distrust = "served-" + ns })
	// Everything else the distrust waits for is done (no Secret is delivered here, certapi's replica
	// re-issues within seconds), and still the distrusted CA stays: the endpoint presents its certificate.
	var waiting *certapiv1alpha1.DistrustStatus
	e2etest.Eventually(t, 60*time.Second, "a distrust pending on the served endpoint only", func(ctx context.Context) (bool, error) {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		d := ca.Status.Distrust
		if d == nil || d.Distrust != "served-"+ns {
			return false, nil
		}
		if d.CompletedAt != nil {
			t.Fatalf("the distrust completed (%s) while %s still presented a certificate of the distrusted CA", d.Completion, endpoint)
		}
		waiting = d
		return d.PendingSecrets == nil && d.PendingReplicas == 0 && d.PendingEndpoints != nil &&
			d.PendingEndpoints.Count == 1 && len(d.PendingEndpoints.Names) == 1 && d.PendingEndpoints.Names[0] == endpoint, nil
	})
	t.Logf("waiting on %+v", *waiting.PendingEndpoints)
	// It stays so past the distrust's dwell (after which nothing else holds it) while the check probes the
	// endpoint again twice, each probe making the rotation look again.
	dwellEnd := waiting.StartedAt.Add(5 * time.Second)
	e2etest.Eventually(t, 30*time.Second, "the distrust's dwell over", func(context.Context) (bool, error) { return time.Now().After(dwellEnd), nil })
	probes := srv.Handshakes()
	e2etest.Eventually(t, 30*time.Second, "two more probes of the endpoint", func(context.Context) (bool, error) { return srv.Handshakes() >= probes+2, nil })
	if d := e2etest.CAObject(t, c).Status.Distrust; d.CompletedAt != nil || d.PendingEndpoints == nil {
		t.Fatalf("the distrust completed (%s) while %s still presented a certificate of the distrusted CA", d.Completion, endpoint)
	}

	// The server reloads a certificate of the new CA; nothing in the API changes, the check sees it.
	srv.Store(testhelpers.IssueServingCert(t, c, ns, "moving"))
	e2etest.Eventually(t, 60*time.Second, "the distrust completed once the endpoint moved", func(ctx context.Context) (bool, error) {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		d := ca.Status.Distrust
		return d != nil && d.Distrust == "served-"+ns && d.CompletedAt != nil, nil
	})
	ca := e2etest.CAObject(t, c)
	if d := ca.Status.Distrust; d.Completion != certapiv1alpha1.DistrustCompletionReissued || d.PendingEndpoints != nil {
		t.Errorf("status.distrust after the endpoint moved: completion %q, pending endpoints %+v; want Reissued and none", d.Completion, d.PendingEndpoints)
	}
	waitServing(t, ns, "moving", metav1.ConditionTrue, "Verified", 60*time.Second)
	// Two bundle changes later, the endpoint is still probed at its interval: the periodic probe survives
	// the event-driven probes that the bundle changes made early.
	probes = srv.Handshakes()
	e2etest.Eventually(t, 30*time.Second, "two more probes of the endpoint after the distrust", func(context.Context) (bool, error) {
		return srv.Handshakes() >= probes+2, nil
	})
}
