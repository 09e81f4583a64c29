package upstreamcsr

import (
	"context"
	"crypto"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// What certapi's CA certificate requests through the CertificateSigningRequest API look like when a
// cert-manager CA issuer signs them.
const (
	cmNamespace     = "org-pki"
	cmIssuer        = "org-ca"
	cmClusterDomain = "cluster.local"
	// cmRequestIsCA is cert-manager's annotation that makes its CSR signers sign a CA certificate.
	cmRequestIsCA = "experimental.cert-manager.io/request-is-ca"
	// cmLifetime is the requested expirationSeconds: more than signer.DefaultMinRemaining, which
	// CheckIntermediate wants left on an imported CA certificate.
	cmLifetime = 90 * 24 * time.Hour
)

// cmUsages are the usages of certapi's CA request: exactly the key usage and extended key usage extensions
// signer.IntermediateRequest puts in the PKCS#10 request. cert-manager refuses a request whose extensions
// differ from spec.usages (see the "usages" subtest).
var cmUsages = []certificatesv1.KeyUsage{certificatesv1.UsageCertSign, certificatesv1.UsageCRLSign, certificatesv1.UsageServerAuth}

// pollEvery is how often the test looks again while it waits.
const pollEvery = 100 * time.Millisecond

var issuerGVR = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "issuers"}

// TestCertManagerSignsIntermediate runs cert-manager's own CA issuer and CertificateSigningRequest signer
// (hack/tools/cert-manager) against kube-apiserver alone, and has it sign certapi's CA certificate request
// (signer.IntermediateRequest) through certificates.k8s.io/v1, as an organisation's CA would: the request
// stays unsigned until approved, the approved one is signed as a CA that chains to the organisation's root
// with the requested name constraints and lifetime, and certapi's own import check (CheckIntermediate)
// accepts it. A denied request is never signed, and one whose usages differ from its extensions is failed.
func TestCertManagerSignsIntermediate(t *testing.T) {
	start := time.Now()
	cp := framework.StartT(t, framework.Options{SkipCertapi: true})
	// -v=4, cert-manager's debug level: it logs each request it skips and why (the denied subtest waits
	// for that).
	cm := framework.StartCertManagerT(t, cp, "-v=4")
	t.Logf("control plane and cert-manager ready in %s", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}

	// The organisation's root, in a CA Issuer's Secret.
	root := signertest.NewRoot(t, "Example Org Root CA", time.Now())
	rootKey, err := x509.MarshalPKCS8PrivateKey(root.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cmNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets(cmNamespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "org-root"},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       root.PEM(),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: rootKey}),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	issuer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1",
		"kind":       "Issuer",
		"metadata":   map[string]any{"name": cmIssuer, "namespace": cmNamespace},
		"spec":       map[string]any{"ca": map[string]any{"secretName": "org-root"}},
	}}
	if _, err := dyn.Resource(issuerGVR).Namespace(cmNamespace).Create(ctx, issuer, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the CA Issuer: %v", err)
	}
	testhelpers.WaitFor(t, pollEvery, time.Minute, "the Issuer to be Ready", func(ctx context.Context) (bool, string) {
		got, err := dyn.Resource(issuerGVR).Namespace(cmNamespace).Get(ctx, cmIssuer, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		return slices.ContainsFunc(conds, func(c any) bool {
			m, _ := c.(map[string]any)
			return m["type"] == "Ready" && m["status"] == "True"
		}), fmt.Sprintf("conditions %v", conds)
	})
	signerName := "issuers.cert-manager.io/" + cmNamespace + "." + cmIssuer
	csrs := kube.CertificatesV1().CertificateSigningRequests()

	// newRequest creates a CSR for a fresh certapi CA key, and waits until cert-manager's signer has seen
	// it unapproved (its WaitingApproval event), when it must still be unsigned.
	newRequest := func(t *testing.T, name string, usages []certificatesv1.KeyUsage) (*certificatesv1.CertificateSigningRequest, crypto.Signer) {
		t.Helper()
		key := signertest.ECKey(t, elliptic.P256())
		req, err := signer.IntermediateRequest(key, signer.IntermediateOptions{ClusterDomain: cmClusterDomain})
		if err != nil {
			t.Fatal(err)
		}
		_, err = csrs.Create(ctx, &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{cmRequestIsCA: "true"}},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Request:           req,
				SignerName:        signerName,
				Usages:            usages,
				ExpirationSeconds: ptr.To(int32(cmLifetime / time.Second)),
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating CSR %s: %v", name, err)
		}
		testhelpers.WaitFor(t, pollEvery, time.Minute, "cert-manager's WaitingApproval event on CSR "+name, func(ctx context.Context) (bool, string) {
			evs, err := kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
				FieldSelector: "involvedObject.kind=CertificateSigningRequest,involvedObject.name=" + name + ",reason=WaitingApproval",
			})
			if err != nil {
				return false, err.Error()
			}
			return len(evs.Items) > 0, fmt.Sprintf("%d events", len(evs.Items))
		})
		got, err := csrs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Certificate) > 0 || len(got.Status.Conditions) > 0 {
			t.Fatalf("CSR %s before approval: status %+v; want no certificate and no condition", name, got.Status)
		}
		return got, key
	}
	decide := func(t *testing.T, csr *certificatesv1.CertificateSigningRequest, decision certificatesv1.RequestConditionType) {
		t.Helper()
		csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: decision, Status: corev1.ConditionTrue, Reason: "CertapiTest", Message: "decided by TestCertManagerSignsIntermediate",
		})
		if _, err := csrs.UpdateApproval(ctx, csr.Name, csr, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("%s CSR %s: %v", decision, csr.Name, err)
		}
	}

	t.Run("approved CA request is signed", func(t *testing.T) {
		csr, key := newRequest(t, "certapi-ca-approved", cmUsages)
		decide(t, csr, certificatesv1.CertificateApproved)
		var signed *certificatesv1.CertificateSigningRequest
		testhelpers.WaitFor(t, pollEvery, time.Minute, "status.certificate of CSR "+csr.Name, func(ctx context.Context) (bool, string) {
			got, err := csrs.Get(ctx, csr.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			signed = got
			// A Failed request is never signed: stop waiting, and say why below.
			return len(got.Status.Certificate) > 0 || findCondition(got, certificatesv1.CertificateFailed) != nil, fmt.Sprintf("conditions %+v", got.Status.Conditions)
		})
		if c := findCondition(signed, certificatesv1.CertificateFailed); c != nil {
			t.Fatalf("CSR %s is Failed: %s: %s", csr.Name, c.Reason, c.Message)
		}
		certs, err := signer.ParseBundle(signed.Status.Certificate)
		if err != nil {
			t.Fatalf("status.certificate: %v", err)
		}
		// cert-manager's CA signer returns the chain without the self-signed root: here, the certificate
		// alone.
		if len(certs) != 1 {
			t.Errorf("status.certificate holds %d certificates; want 1 (the signed one; the self-signed root is left out)", len(certs))
		}
		cert := certs[0]
		roots := x509.NewCertPool()
		roots.AddCert(root.Certificate)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("the signed certificate does not chain to the root: %v", err)
		}
		if !cert.BasicConstraintsValid || !cert.IsCA {
			t.Errorf("signed certificate: basic constraints valid %v, CA %v; want a CA", cert.BasicConstraintsValid, cert.IsCA)
		}
		// cert-manager does not copy the requested path length 0: no limit (CheckIntermediate warns).
		if cert.MaxPathLen != -1 || cert.MaxPathLenZero {
			t.Errorf("signed certificate: MaxPathLen %d (zero %v); cert-manager v1.21 is known to drop the requested 0 (-1: no limit)", cert.MaxPathLen, cert.MaxPathLenZero)
		}
		if want := signer.PermittedDNSDomains(cmClusterDomain); !slices.Equal(cert.PermittedDNSDomains, want) || !cert.PermittedDNSDomainsCritical {
			t.Errorf("signed certificate: permitted DNS domains %q (critical %v); want %q, critical", cert.PermittedDNSDomains, cert.PermittedDNSDomainsCritical, want)
		}
		if !signer.ForbidsURIsAndEmails(cert) || len(cert.ExcludedIPRanges) != 2 || len(cert.PermittedIPRanges) != 0 {
			t.Errorf("signed certificate: URI %q/%q, e-mail %q/%q, IP %v/%v constraints (permitted/excluded); want certapi's: none of each permitted",
				cert.PermittedURIDomains, cert.ExcludedURIDomains, cert.PermittedEmailAddresses, cert.ExcludedEmailAddresses, cert.PermittedIPRanges, cert.ExcludedIPRanges)
		}
		if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign; cert.KeyUsage != want {
			t.Errorf("signed certificate: key usage %b; want cert sign and CRL sign (%b)", cert.KeyUsage, want)
		}
		if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
			t.Errorf("signed certificate: extended key usage %v; want serverAuth only", cert.ExtKeyUsage)
		}
		if got := cert.NotAfter.Sub(cert.NotBefore); got != cmLifetime {
			t.Errorf("signed certificate: valid for %s; want expirationSeconds' %s", got, cmLifetime)
		}
		if len(cert.SubjectKeyId) == 0 || !slices.Equal(cert.AuthorityKeyId, root.Certificate.SubjectKeyId) {
			t.Errorf("signed certificate: subject key id %x, authority key id %x; want one, and the root's %x", cert.SubjectKeyId, cert.AuthorityKeyId, root.Certificate.SubjectKeyId)
		}
		// certapi imports it as its intermediate CA.
		_, warnings, err := signer.CheckIntermediate(signed.Status.Certificate, nil, key, signer.ImportOptions{ClusterDomain: cmClusterDomain, RootsPEM: root.PEM()})
		if err != nil {
			t.Fatalf("certapi refuses the certificate cert-manager signed: %v", err)
		}
		t.Logf("CheckIntermediate accepts it; warnings: %v", warnings)
	})

	t.Run("denied request is never signed", func(t *testing.T) {
		csr, _ := newRequest(t, "certapi-ca-denied", cmUsages)
		decide(t, csr, certificatesv1.CertificateDenied)
		if err := cm.WaitLog(ctx, time.Minute, "cert-manager to skip the denied CSR "+csr.Name,
			"has been denied so skipping processing", csr.Name); err != nil {
			t.Fatal(err)
		}
		got, err := csrs.Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Status.Certificate) > 0 {
			t.Fatalf("denied CSR %s was signed", csr.Name)
		}
		if c := findCondition(got, certificatesv1.CertificateFailed); c != nil {
			t.Errorf("denied CSR %s got a Failed condition (%s: %s); cert-manager leaves a denied request alone", csr.Name, c.Reason, c.Message)
		}
	})

	t.Run("usages other than the request's extensions fail the request", func(t *testing.T) {
		// digital signature instead of server auth: spec.usages no longer match the key usage and
		// extended key usage extensions of the PKCS#10 request.
		usages := []certificatesv1.KeyUsage{certificatesv1.UsageCertSign, certificatesv1.UsageCRLSign, certificatesv1.UsageDigitalSignature}
		csr, _ := newRequest(t, "certapi-ca-usages", usages)
		decide(t, csr, certificatesv1.CertificateApproved)
		var got *certificatesv1.CertificateSigningRequest
		testhelpers.WaitFor(t, pollEvery, time.Minute, "CSR "+csr.Name+" to be Failed", func(ctx context.Context) (bool, string) {
			var err error
			if got, err = csrs.Get(ctx, csr.Name, metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			return len(got.Status.Certificate) > 0 || findCondition(got, certificatesv1.CertificateFailed) != nil, fmt.Sprintf("conditions %+v", got.Status.Conditions)
		})
		if len(got.Status.Certificate) > 0 {
			t.Fatalf("CSR %s was signed with usages %v that differ from its request's extensions", csr.Name, usages)
		}
		failed := findCondition(got, certificatesv1.CertificateFailed)
		if !strings.Contains(failed.Message, "KeyUsages") {
			t.Errorf("Failed condition %s: %q; want it to name the KeyUsages mismatch", failed.Reason, failed.Message)
		}
		t.Logf("cert-manager fails it: %s: %s", failed.Reason, failed.Message)
	})
}

// findCondition returns csr's condition of type typ, or nil.
func findCondition(csr *certificatesv1.CertificateSigningRequest, typ certificatesv1.RequestConditionType) *certificatesv1.CertificateSigningRequestCondition {
	for i := range csr.Status.Conditions {
		if csr.Status.Conditions[i].Type == typ {
			return &csr.Status.Conditions[i]
		}
	}
	return nil
}
