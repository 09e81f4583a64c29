// Package e2etest holds the helpers that the end-to-end packages share: test/e2e and test/e2e/faults
// (the fault tests, a package of their own so that `go test` runs them beside the rest of test/e2e).
package e2etest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/test/framework"
)

// CAKey is the etcd key under which certapi stores the CA's private keys (CertificateAuthorityKey default).
const CAKey = "/registry/certapi.dev/certificateauthoritykeys/default"

// Clients returns a certapi clientset and a Kubernetes clientset for config.
func Clients(t testing.TB, config *rest.Config) (versioned.Interface, kubernetes.Interface) {
	t.Helper()
	c, err := versioned.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// Namespace creates a namespace with a generated name for one test, and deletes it afterwards.
func Namespace(t testing.TB, kube kubernetes.Interface) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// Request returns a minimal ServingCertRequest for service svc.
func Request(name, svc string) *certapiv1alpha1.ServingCertRequest {
	return &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc},
	}
}

// Eventually polls cond every 100ms until it returns true or the deadline passes, and fails the test then.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// CAObject returns CertificateAuthority/default.
func CAObject(t testing.TB, c versioned.Interface) *certapiv1alpha1.CertificateAuthority {
	t.Helper()
	ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// UpdateCA applies change to CertificateAuthority/default and updates it, reading it again after a
// conflict: the leader writes the object's status (injection progress, replicas) at any moment, as
// kubectl certapi rotate and distrust expect.
func UpdateCA(t testing.TB, c versioned.Interface, change func(*certapiv1alpha1.CertificateAuthority)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(context.Background(), "default", metav1.GetOptions{})
		if err != nil {
			return err
		}
		change(ca)
		_, err = c.CertapiV1alpha1().CertificateAuthorities().Update(context.Background(), ca, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("updating CertificateAuthority/default: %v", err)
	}
}

// ActiveSerial waits until CertificateAuthority/default shows an Active CA and returns its serial.
func ActiveSerial(t testing.TB, own *framework.ControlPlane) string {
	t.Helper()
	c, _ := Clients(t, own.AdminConfig)
	var serial string
	Eventually(t, 60*time.Second, "CertificateAuthority/default to show the Active CA", func(ctx context.Context) (bool, error) {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
		if err != nil || ca.Status.Active == nil {
			return false, nil
		}
		serial = ca.Status.Active.SerialNumber
		return true, nil
	})
	return serial
}

// BundleSize returns the number of certificates in a PEM bundle, -1 when it does not parse.
func BundleSize(pem []byte) int {
	certs, err := signer.ParseBundle(pem)
	if err != nil {
		return -1
	}
	return len(certs)
}

// IssuerSerialOf returns the serial of the CA in bundle that signed certPEM.
func IssuerSerialOf(t testing.TB, certPEM, bundle string) string {
	t.Helper()
	leaf, err := signer.ParseBundle([]byte(certPEM))
	if err != nil || len(leaf) != 1 {
		t.Fatalf("parsing the certificate: %v", err)
	}
	cas, err := signer.ParseBundle([]byte(bundle))
	if err != nil {
		t.Fatal(err)
	}
	for _, ca := range cas {
		if leaf[0].CheckSignatureFrom(ca) == nil {
			return signer.FormatSerialNumber(ca.SerialNumber)
		}
	}
	t.Fatal("no CA in the bundle signed the certificate")
	return ""
}

// ECKey generates an ECDSA key on curve.
func ECKey(t testing.TB, curve elliptic.Curve) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// CSRPEM makes a PKCS#10 request for key; its subject and SANs are deliberately foreign, since certapi
// must ignore them and take the identity from the ServingCertRequest.
func CSRPEM(t testing.TB, key crypto.Signer) string {
	t.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "evil.example.com"},
		DNSNames: []string{"evil.example.com", "kubernetes.default.svc"},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}

// ServingCert returns a servingcerts subresource body for csr, with an optional duration.
func ServingCert(csr string, d *metav1.Duration) *certapiv1alpha1.ServingCert {
	return &certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: csr, Duration: d}}
}
