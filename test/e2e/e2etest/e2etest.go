// Package e2etest holds the helpers that the end-to-end packages share: test/e2e, test/e2e/faults (the
// fault tests) and test/e2e/manifests (the manifests of artifacts/), packages of their own so that `go
// test` runs them beside the rest of test/e2e.
package e2etest

import (
	"context"
	"crypto/elliptic"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// Prefix is certapi's key prefix in etcd (apiserver.EtcdPathPrefix): its objects, the CA record, the
// leader election and the handoff keys are under it.
const Prefix = "/registry/certapi.dev"

// CAKey is the etcd key under which certapi stores the CA's private keys (CertificateAuthorityKey default).
const CAKey = Prefix + "/certificateauthoritykeys/default"

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

// OptIn opts namespace ns in to Secret delivery (ServingCertRequest spec.secretName) with the label
// certapi.dev/secret-delivery=enabled, as docs/usage.md says. The framework's certapi runs with an admin
// kubeconfig, so the RoleBinding a namespace also needs in a real install (the chart's ClusterRole
// certapi:secret-delivery for certapi's ServiceAccount) changes nothing here; test/e2e/manifests runs
// certapi with the chart's RBAC and creates it.
func OptIn(t testing.TB, kube kubernetes.Interface, ns string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, certapiv1alpha1.LabelSecretDelivery, certapiv1alpha1.SecretDeliveryEnabled)
	if _, err := kube.CoreV1().Namespaces().Patch(context.Background(), ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("opting namespace %s in to Secret delivery: %v", ns, err)
	}
}

// SecretNamespace creates a namespace for the test (see Namespace) opted in to Secret delivery (see OptIn).
func SecretNamespace(t testing.TB, kube kubernetes.Interface) string {
	t.Helper()
	ns := Namespace(t, kube)
	OptIn(t, kube, ns)
	return ns
}

// Request returns a minimal ServingCertRequest for service svc.
func Request(name, svc string) *certapiv1alpha1.ServingCertRequest {
	return &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc},
	}
}

// Eventually is testhelpers.Eventually at the end-to-end packages' pace: cond every 100 ms until it
// holds, failing the test after timeout or at once on an error from cond.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	testhelpers.Eventually(t, 100*time.Millisecond, timeout, what, cond)
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
	c, _ := testhelpers.Clients(t, own.AdminConfig)
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

// ServingCert returns a servingcerts subresource body for csr, with an optional duration.
func ServingCert(csr string, d *metav1.Duration) *certapiv1alpha1.ServingCert {
	return &certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: csr, Duration: d}}
}

// IssuedBy asks servingcerts for a certificate of the ServingCertRequest ns/name, for a minute while the
// answer is 503 (no leader, or a CA key the token cannot use yet), and checks that the CA serial signed it.
func IssuedBy(t testing.TB, c versioned.Interface, ns, name, serial string) {
	t.Helper()
	body := ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil)
	var out *certapiv1alpha1.ServingCert
	Eventually(t, time.Minute, "a certificate from servingcerts", func(ctx context.Context) (bool, error) {
		var err error
		out, err = c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, name, body, metav1.CreateOptions{})
		if apierrors.IsServiceUnavailable(err) {
			return false, nil
		}
		return err == nil, err
	})
	if got := IssuerSerialOf(t, out.Status.Certificate, out.Status.CABundle); got != serial {
		t.Fatalf("the certificate was signed by CA %s, want %s", got, serial)
	}
}
