// Package upstreamcsr runs certapi as an intermediate of an organisation's root signed through the
// certificates.k8s.io CertificateSigningRequest API, with cert-manager's own CSR signer (built by
// hack/build-tools.sh cert-manager) as the organisation's CA. A package of its own, apart from test/e2e, so
// that make test runs it with the other tests that need a tool of make tools-other, while test/e2e starts
// at once.
package upstreamcsr

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// orgSigner is the signerName of cert-manager's ClusterIssuer that stands for the organisation's CA.
const orgSigner = "clusterissuers.cert-manager.io/org-root"

// TestIntermediateThroughCertificateSigningRequest runs certapi as an intermediate of an organisation's
// root with a signer nobody on this project wrote: cert-manager's own CertificateSigningRequest CA signer
// (built from its module), with the root's key in a ClusterIssuer. certapi asks through a
// CertificateSigningRequest, which stays unsigned until the test approves it as the organisation would;
// then certapi imports what the signer issued and rotates to it. A rotation's request is denied: certapi
// reports it and waits; the request deleted, certapi asks again, and the approved one is imported.
func TestIntermediateThroughCertificateSigningRequest(t *testing.T) {
	root := signertest.NewRoot(t, "Example Org Root", time.Now())
	rootFile := filepath.Join(t.TempDir(), "org-root.crt")
	if err := os.WriteFile(rootFile, root.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	own := framework.StartT(t, framework.Options{
		CertapiReplicas:    2,
		CertapiReplicaArgs: framework.LeaderIdentityArgs,
		CertapiArgs: []string{"--ca-upstream=CertificateSigningRequest", "--ca-upstream-signer-name=" + orgSigner,
			"--ca-upstream-roots=" + rootFile, "--ca-upstream-expiration=2160h", "--rotation-grace=2s", "--max-certificate-duration=20s"},
	})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	startOrgSigner(t, own, root)
	bootstrap := e2etest.ActiveSerial(t, own)

	// The first CA is certapi's own; the request to replace it goes to the signer as a CertificateSigningRequest.
	first := e2etest.PendingRequest(t, c, signer.PendingSelfSigned)
	if first.CertificateSigningRequest == "" || !strings.Contains(first.WaitingFor, "kubectl certificate approve "+first.CertificateSigningRequest) {
		t.Fatalf("status.pendingRequest: CertificateSigningRequest %q, waitingFor %q; want the request's name and how to approve it", first.CertificateSigningRequest, first.WaitingFor)
	}
	csr := certapiCSR(t, kube, first)
	if len(csr.Status.Certificate) > 0 {
		t.Fatalf("CertificateSigningRequest %s was signed before anyone approved it", csr.Name)
	}
	approveCSR(t, kube, csr.Name)
	active := waitImported(t, c, root, bootstrap)
	t.Logf("the CA certificate %s cert-manager signed through CertificateSigningRequest %s is Active", active, csr.Name)
	waitCAEvent(t, kube, "CAImported", csr.Name)

	// A rotation whose request is denied: reported, and nothing else happens until it is deleted.
	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.ForceRotation = "e2e-csr-1" })
	next := e2etest.PendingRequest(t, c, signer.PendingForceRotation)
	denied := certapiCSR(t, kube, next)
	if denied.Name == csr.Name {
		t.Fatalf("the rotation's request reuses the name %s of the first one", csr.Name)
	}
	decide(t, kube, denied.Name, certificatesv1.CertificateDenied, "NotToday", "the organisation declines")
	waitCAEvent(t, kube, "CertificateSigningRequestDenied", denied.Name)
	if ca := e2etest.CAObject(t, c); ca.Status.PendingRequest == nil || ca.Status.PendingRequest.CertificateSigningRequest != denied.Name || ca.Status.Active.SerialNumber != active {
		t.Fatalf("after the denial: pending %+v, active %s; want the denied request still pending and %s still Active", ca.Status.PendingRequest, ca.Status.Active.SerialNumber, active)
	}
	// Deleted, it is made again for the same key, and this time approved.
	if err := kube.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), denied.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var again *certificatesv1.CertificateSigningRequest
	e2etest.Eventually(t, 30*time.Second, "certapi to ask again after the denied request was deleted", func(ctx context.Context) (bool, error) {
		x, err := kube.CertificatesV1().CertificateSigningRequests().Get(ctx, denied.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		again = x
		return x.UID != denied.UID, nil
	})
	if string(again.Spec.Request) != next.Request {
		t.Fatalf("the request made again asks for another key than the one that waits")
	}
	approveCSR(t, kube, again.Name)
	second := waitImported(t, c, root, active)
	t.Logf("after a denial, the rotation's CA certificate %s is Active", second)
}

// startOrgSigner starts cert-manager's controller with root's key in the Secret of a ClusterIssuer of
// the CA kind, org-root, and waits until cert-manager holds it Ready: the organisation's CA, signing for
// orgSigner.
func startOrgSigner(t *testing.T, own *framework.ControlPlane, root *signertest.Root) {
	t.Helper()
	ctx := context.Background()
	_, kube := testhelpers.Clients(t, own.AdminConfig)
	framework.StartCertManagerT(t, own)
	keyPEM, err := signer.EncodeKeyPEM(root.Key)
	if err != nil {
		t.Fatal(err)
	}
	// cert-manager reads a ClusterIssuer's Secret from its --cluster-resource-namespace, which the
	// framework sets to kube-system.
	if _, err := kube.CoreV1().Secrets(metav1.NamespaceSystem).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "org-root"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: root.PEM(), corev1.TLSPrivateKeyKey: keyPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(own.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	issuers := dyn.Resource(schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "clusterissuers"})
	issuer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
		"metadata": map[string]any{"name": "org-root"},
		"spec":     map[string]any{"ca": map[string]any{"secretName": "org-root"}},
	}}
	if _, err := issuers.Create(ctx, issuer, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 60*time.Second, "cert-manager to hold ClusterIssuer org-root Ready", func(ctx context.Context) (bool, error) {
		got, err := issuers.Get(ctx, "org-root", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}

// certapiCSR waits for the CertificateSigningRequest certapi makes for p and checks what it asks.
func certapiCSR(t *testing.T, kube kubernetes.Interface, p *certapiv1alpha1.CertificateAuthorityPendingRequest) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	var csr *certificatesv1.CertificateSigningRequest
	e2etest.Eventually(t, 30*time.Second, "CertificateSigningRequest "+p.CertificateSigningRequest, func(ctx context.Context) (bool, error) {
		x, err := kube.CertificatesV1().CertificateSigningRequests().Get(ctx, p.CertificateSigningRequest, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		csr = x
		return err == nil, err
	})
	switch {
	case csr.Spec.SignerName != orgSigner:
		t.Fatalf("CertificateSigningRequest %s asks signer %s; want %s", csr.Name, csr.Spec.SignerName, orgSigner)
	case string(csr.Spec.Request) != p.Request:
		t.Fatalf("CertificateSigningRequest %s holds another request than status.pendingRequest", csr.Name)
	case csr.Labels[certapiv1alpha1.LabelCARequest] != "true" || csr.Annotations[certapiv1alpha1.AnnotationCertManagerRequestIsCA] != "true":
		t.Fatalf("CertificateSigningRequest %s: labels %v, annotations %v", csr.Name, csr.Labels, csr.Annotations)
	case csr.Spec.ExpirationSeconds == nil || *csr.Spec.ExpirationSeconds != int32((2160*time.Hour)/time.Second):
		t.Fatalf("CertificateSigningRequest %s: expirationSeconds %v; want 2160h's", csr.Name, csr.Spec.ExpirationSeconds)
	}
	return csr
}

// approveCSR approves the CertificateSigningRequest name, as the organisation's approver would.
func approveCSR(t *testing.T, kube kubernetes.Interface, name string) {
	t.Helper()
	decide(t, kube, name, certificatesv1.CertificateApproved, "OrgApproved", "approved by the e2e test")
}

// decide adds the condition (Approved or Denied) to the CertificateSigningRequest name.
func decide(t *testing.T, kube kubernetes.Interface, name string, kind certificatesv1.RequestConditionType, reason, message string) {
	t.Helper()
	ctx := context.Background()
	csr, err := kube.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: kind, Status: corev1.ConditionTrue, Reason: reason, Message: message,
	})
	if _, err := kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, name, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("%s CertificateSigningRequest %s: %v", kind, name, err)
	}
}

// waitImported waits until a CA certificate the root signed is Active in place of before, with nothing
// pending and the root alone in the bundle (the default anchor; before retired), and returns its serial.
func waitImported(t *testing.T, c versioned.Interface, root *signertest.Root, before string) string {
	t.Helper()
	var active string
	e2etest.Eventually(t, 90*time.Second, "the CA certificate the signer issued to be Active, and the root alone in the bundle", func(context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		if ca.Status.Active == nil || ca.Status.Active.SerialNumber == before || ca.Status.PendingRequest != nil {
			return false, nil
		}
		active = ca.Status.Active.SerialNumber
		return ca.Status.CABundle == string(root.PEM()), nil
	})
	return active
}

// waitCAEvent waits for an Event of reason on CertificateAuthority/default whose note names name.
func waitCAEvent(t *testing.T, kube kubernetes.Interface, reason, name string) {
	t.Helper()
	e2etest.Eventually(t, 30*time.Second, "a "+reason+" Event naming "+name, func(ctx context.Context) (bool, error) {
		evs, err := kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Reason == reason && ev.Regarding.Kind == "CertificateAuthority" && strings.Contains(ev.Note, name) {
				return true, nil
			}
		}
		return false, nil
	})
}
