package custody

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/node/nodetest"
)

const (
	// pageSigner is the signerName of the page's values: cert-manager's ClusterIssuer holding the
	// organisation's CA, for which the test signs here.
	pageSigner = "clusterissuers.cert-manager.io/org-intermediate"
	webhookNS  = "example-webhook"
	// webhookSelector selects the example webhook's pods.
	webhookSelector = "app.kubernetes.io/name=example-webhook"
)

// certapiCSR waits for the CertificateSigningRequest certapi makes for p and checks what it asks.
func certapiCSR(t *testing.T, kube kubernetes.Interface, p *certapiv1alpha1.CertificateAuthorityPendingRequest) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var csr *certificatesv1.CertificateSigningRequest
	nodetest.WaitFor(t, time.Minute, "the CertificateSigningRequest of the pending request", func(ctx context.Context) (bool, string) {
		if p.CertificateSigningRequest == "" {
			return false, "status.pendingRequest names none"
		}
		x, err := kube.CertificatesV1().CertificateSigningRequests().Get(ctx, p.CertificateSigningRequest, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		csr = x
		return true, ""
	})
	if csr.Spec.SignerName != pageSigner || string(csr.Spec.Request) != p.Request || csr.Labels[certapiv1alpha1.LabelCARequest] != "true" {
		t.Fatalf("CertificateSigningRequest %s: signer %s, labels %v, the pending request: %v; want %s, certapi's label and the request",
			csr.Name, csr.Spec.SignerName, csr.Labels, string(csr.Spec.Request) == p.Request, pageSigner)
	}
	return csr
}

// waitImported waits until a CA certificate the root signed is Active in place of before, with nothing
// pending and the root in the bundle (the default anchor; beside it the self-signed first CA, until every
// certificate it signed has expired), and returns its serial.
func waitImported(t *testing.T, c versioned.Interface, root *signertest.Root, before string) string {
	t.Helper()
	var active string
	nodetest.WaitFor(t, 2*time.Minute, "a CA certificate the root signed Active in place of "+before+", the root in the bundle", func(context.Context) (bool, string) {
		ca := e2etest.CAObject(t, c)
		if ca.Status.Active == nil || ca.Status.Active.SerialNumber == before || ca.Status.PendingRequest != nil {
			return false, "not yet"
		}
		active = ca.Status.Active.SerialNumber
		return strings.Contains(ca.Status.CABundle, string(root.PEM())), "the root is not in the bundle"
	})
	return active
}

// chainedTo checks that a servingcerts answer for ns/chain carries the leaf and the intermediate serial,
// and verifies to root.
func chainedTo(t *testing.T, c versioned.Interface, ns string, root *signertest.Root, serial string) {
	t.Helper()
	body := e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil)
	out, err := c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(context.Background(), "chain", body, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	certs, err := signer.ParseBundle([]byte(out.Status.Certificate))
	if err != nil || len(certs) != 2 {
		t.Fatalf("the served chain: %d certificates, %v; want the leaf and certapi's intermediate", len(certs), err)
	}
	if got := signer.FormatSerialNumber(certs[1].SerialNumber); got != serial {
		t.Errorf("the chain's intermediate is %s; want the Active CA %s", got, serial)
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root.Certificate)
	inter.AddCert(certs[1])
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the served chain does not verify to the organisation's root: %v", err)
	}
}

// webhookDenies checks that kube-apiserver calls the example webhook for ns and enforces its answer.
func webhookDenies(t *testing.T, kube kubernetes.Interface, ns string) {
	t.Helper()
	forbidden := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "forbidden-", Labels: map[string]string{"example.certapi.dev/forbidden": "true"}}}
	nodetest.WaitFor(t, time.Minute, "kube-apiserver to call the webhook and deny a forbidden ConfigMap", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, forbidden, metav1.CreateOptions{})
		return err != nil && strings.Contains(err.Error(), "denied the request"), fmt.Sprintf("%v", err)
	})
}

// certificateFailures returns the webhook calls of failed that a certificate failed: a handshake kube-apiserver
// refused (a certificate the caBundle does not verify, a name, an expiry), which is what a rotation must never
// cause. The others are the machine's: kube-apiserver's 5 s wait running out, or no Ready endpoint while the
// webhook's pods missed their probes on a loaded machine (a cold make test: 44 calls of 163 in one run).
func certificateFailures(failed []error) []error {
	var out []error
	for _, err := range failed {
		if msg := err.Error(); strings.Contains(msg, "x509") || strings.Contains(msg, "tls:") || strings.Contains(msg, "certificate") {
			out = append(out, err)
		}
	}
	return out
}

// callWebhook creates allowed ConfigMaps in ns, each one a call of the webhook by kube-apiserver, every
// 200 ms until the test ends or the returned function is called, which stops the calls and returns how
// many there were and the errors of those that failed.
func callWebhook(t *testing.T, kube kubernetes.Interface, ns string) func() (int, []error) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg     sync.WaitGroup
		n      int
		failed []error
	)
	wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "allowed-"}}
			_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
			if ctx.Err() != nil {
				return
			}
			n++
			if err != nil {
				failed = append(failed, err)
			}
		}
	})
	stop := func() (int, []error) {
		cancel()
		wg.Wait()
		return n, failed
	}
	t.Cleanup(func() { stop() })
	return stop
}
