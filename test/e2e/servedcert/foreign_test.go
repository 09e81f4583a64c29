package servedcert

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestKeptForeignCAVerifies: an object that keeps a foreign CA after certapi's bundle
// (certapi.dev/keep-foreign-ca) is checked against what it holds: a server presenting a certificate of
// that CA verifies (kube-apiserver accepts it too), and status.served counts it under that CA.
func TestKeptForeignCAVerifies(t *testing.T) {
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	// A CA of another tool: certapi tells its own CAs by their common name.
	foreign, err := signer.NewCA(signer.CAOptions{ClusterDomain: signertest.ClusterDomain, CommonName: "other-tool-webhook-ca"})
	if err != nil {
		t.Fatal(err)
	}
	srv := testhelpers.ServeTLS(t, host, testhelpers.CertFromCA(t, foreign, ns, "kept"))
	testhelpers.SelectorlessService(t, kube, ns, "kept", srv.Addr, true)
	name := testhelpers.InjectedWebhook(t, kube, ns, "kept", webhookDomain, testhelpers.KeepForeignCA(signer.EncodeBundle(foreign.Certificate)))
	endpoint := "ValidatingWebhookConfiguration " + name + " webhook kept.served.e2e.certapi.dev: " + srv.Addr
	serial := signer.FormatSerialNumber(foreign.Certificate.SerialNumber)
	e2etest.Eventually(t, 60*time.Second, "status.served counting the endpoint under the kept foreign CA", func(ctx context.Context) (bool, error) {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil || ca.Status.Served == nil {
			return false, err
		}
		for _, w := range ca.Status.Served.WorstTargets {
			if strings.HasPrefix(w, "ValidatingWebhookConfiguration "+name+" ") {
				t.Fatalf("status.served names the webhook that keeps the CA its server's certificate is from: %q", w)
			}
		}
		return slices.ContainsFunc(ca.Status.Served.Issuers, func(i certapiv1alpha1.ServedIssuer) bool {
			return i.SerialNumber == serial && slices.Contains(i.Names, endpoint)
		}), nil
	})
}
