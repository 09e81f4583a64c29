package manifests

import (
	"context"
	"crypto/elliptic"
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
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

const (
	// csrPolicy is the chart's admission policy on certapi's CertificateSigningRequest writes.
	csrPolicy = "certapi-certificatesigningrequests"
	// csrSigner is the organisation's signer certapi asks in TestManifestsCSRUpstreamPolicy: the test
	// approves and signs its requests, as the organisation would.
	csrSigner = "example.com/org-ca"
)

// TestManifestsCSRUpstreamPolicy runs certapi as an intermediate CA signed through CertificateSigningRequests
// (--ca-upstream=CertificateSigningRequest) with exactly the RBAC and admission policies the chart renders
// for it (caUpstream.certificateSigningRequests, the base's other values), on a control plane of its own:
// certapi's requests pass the policy <release>-certificatesigningrequests, the certificate the test signs
// for one is imported, and certapi deletes the unsigned request of a key that no longer waits; certapi is
// never told "forbidden". Then, as its ServiceAccount, as a thief of its token would: a request like
// certapi's own may be created and deleted, and every other request, the delete of one certapi did not
// label, and any update are refused, each by the rule that says why; other users are not affected.
func TestManifestsCSRUpstreamPolicy(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs := renderChart(t, root, "--set", "caUpstream.certificateSigningRequests=true",
		"--set-json", `extraArgs=["--ca-upstream=CertificateSigningRequest","--ca-upstream-signer-name=`+csrSigner+`"]`)
	policy := findObject(t, objs, "ValidatingAdmissionPolicy", "", csrPolicy)
	t.Run("the policy type-checks", func(t *testing.T) {
		typeCheckPolicies(t, []*unstructured.Unstructured{policy})
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := applyForCertapi(ctx, t, objs)
	c, kube := testhelpers.Clients(t, r.own.AdminConfig)
	_, asSA := testhelpers.Clients(t, r.sa)
	csrs, saCSRs := kube.CertificatesV1().CertificateSigningRequests(), asSA.CertificatesV1().CertificateSigningRequests()
	key := signertest.ECKey(t, elliptic.P256())
	request, err := signer.IntermediateRequest(key, signer.IntermediateOptions{ClusterDomain: signertest.ClusterDomain})
	if err != nil {
		t.Fatal(err)
	}
	// certapiLike is a request as certapi makes it (pkg/controller/upstreamcsr), named name, changed by change.
	certapiLike := func(name string, change func(*certificatesv1.CertificateSigningRequest)) *certificatesv1.CertificateSigningRequest {
		csr := &certificatesv1.CertificateSigningRequest{
			ObjectMeta: metav1.ObjectMeta{
				Name:        name,
				Labels:      map[string]string{certapiv1alpha1.LabelCARequest: "true"},
				Annotations: map[string]string{certapiv1alpha1.AnnotationCertManagerRequestIsCA: "true"},
			},
			Spec: certificatesv1.CertificateSigningRequestSpec{
				Request:    request,
				SignerName: csrSigner,
				Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageCertSign, certificatesv1.UsageCRLSign, certificatesv1.UsageServerAuth},
			},
		}
		if change != nil {
			change(csr)
		}
		return csr
	}

	// The policy takes effect once kube-apiserver's admission plugin has seen it; certapi starts after
	// that, so that its own requests go through it. A probe that went through before is removed.
	e2etest.Eventually(t, time.Minute, "the CertificateSigningRequest policy to take effect", func(ctx context.Context) (bool, error) {
		_, err := saCSRs.Create(ctx, certapiLike("certapi-ca-probe", nil), metav1.CreateOptions{})
		if err == nil {
			return false, csrs.Delete(ctx, "certapi-ca-probe", metav1.DeleteOptions{})
		}
		return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+csrPolicy+"'"), nil
	})

	// certapi's own path: the organisation's root, which the test signs with.
	orgRoot := signertest.NewRoot(t, "Example Org Root", time.Now())
	rootFile := filepath.Join(t.TempDir(), "org-root.crt")
	if err := os.WriteFile(rootFile, orgRoot.PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	r.start(append(r.args, "--ca-upstream-roots="+rootFile, "--rotation-grace=2s", "--max-certificate-duration=20s"))
	r.waitAvailable(ctx)
	bootstrap := e2etest.ActiveSerial(t, r.own)

	// 1. The first request: certapi's ServiceAccount creates it (through the policy); approved and signed
	// as the organisation would, it is imported.
	first := e2etest.PendingRequest(t, c, signer.PendingSelfSigned)
	csr := waitCertapiCSR(ctx, t, r, kube, first)
	if err := e2etest.SignCSR(ctx, kube, csr, orgRoot.Sign(t, csr.Spec.Request, time.Now(), signertest.SignOptions{})); err != nil {
		t.Fatal(err)
	}
	r.waitFor(ctx, "the CA certificate signed through CertificateSigningRequest "+csr.Name+" to be Active", 90*time.Second, func(context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		return ca.Status.Active != nil && ca.Status.Active.SerialNumber != bootstrap && ca.Status.PendingRequest == nil, nil
	})

	// 2. A rotation's request, signed by hand instead (the import subresource): certapi deletes its
	// unsigned CertificateSigningRequest, which no longer waits, through the policy.
	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.ForceRotation = "mf-csr-1" })
	next := e2etest.PendingRequest(t, c, signer.PendingForceRotation)
	stale := waitCertapiCSR(ctx, t, r, kube, next)
	if _, err := c.CertapiV1alpha1().CertificateAuthorities().Import(ctx, certapiv1alpha1.CertificateAuthorityName, &certapiv1alpha1.CertificateAuthorityImport{
		Spec: certapiv1alpha1.CertificateAuthorityImportSpec{Certificate: string(orgRoot.Sign(t, stale.Spec.Request, time.Now(), signertest.SignOptions{}))},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("importing the rotation's certificate by hand: %v", err)
	}
	r.waitFor(ctx, "certapi to delete CertificateSigningRequest "+stale.Name+", whose key no longer waits", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := csrs.Get(ctx, stale.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
	if _, err := csrs.Get(ctx, csr.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("the signed CertificateSigningRequest %s: %v; want it kept as a record", csr.Name, err)
	}
	r.checkNeverForbidden()
	// The cases below create requests certapi's controller would act on (it deletes unsigned labelled
	// requests of keys that do not wait): certapi stops first.
	r.stop()

	// 3. A stolen token.
	own := "certapi-ca-0123456789abcdef"
	theirs, err := csrs.Create(ctx, certapiLike("someone-elses-request", func(x *certificatesv1.CertificateSigningRequest) {
		x.Labels, x.Annotations, x.Spec.SignerName = nil, nil, "kubernetes.io/kube-apiserver-client"
		x.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
	}), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("another user's request for kubernetes.io/kube-apiserver-client: %v; the policy must not affect other users", err)
	}
	theirs.Status.Conditions = append(theirs.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Stolen", Message: "approved with certapi's token"})
	create := func(x *certificatesv1.CertificateSigningRequest) func(ctx context.Context) error {
		return func(ctx context.Context) error { _, err := saCSRs.Create(ctx, x, metav1.CreateOptions{}); return err }
	}
	cases := []struct {
		name string
		do   func(ctx context.Context) error
		// refusal is what the refusal says; "" when certapi's ServiceAccount may do it.
		refusal string
		byRBAC  bool
	}{
		{name: "certapi: a request like its own", do: create(certapiLike(own, nil))},
		{name: "certapi: a request like its own, with expirationSeconds", do: create(certapiLike("certapi-ca-fedcba9876543210", func(x *certificatesv1.CertificateSigningRequest) {
			x.Spec.ExpirationSeconds = ptr.To[int32](8760 * 3600)
		}))},
		{name: "certapi: deleting its own", do: func(ctx context.Context) error {
			return saCSRs.Delete(ctx, "certapi-ca-fedcba9876543210", metav1.DeleteOptions{})
		}},
		{name: "a client certificate of kubernetes.io/kube-apiserver-client", refusal: "only for the signer " + csrSigner + " (caUpstream.signerName), not kubernetes.io/kube-apiserver-client",
			do: create(certapiLike("certapi-ca-1111111111111111", func(x *certificatesv1.CertificateSigningRequest) {
				x.Spec.SignerName = "kubernetes.io/kube-apiserver-client"
				x.Spec.Usages = []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageClientAuth}
			}))},
		{name: "certapi's request for another signer", refusal: "only for the signer " + csrSigner,
			do: create(certapiLike("certapi-ca-2222222222222222", func(x *certificatesv1.CertificateSigningRequest) { x.Spec.SignerName = "example.com/auto-approved" }))},
		{name: "an unlabelled request", refusal: "labelled certapi.dev/ca-request=true",
			do: create(certapiLike("certapi-ca-3333333333333333", func(x *certificatesv1.CertificateSigningRequest) { x.Labels = nil }))},
		{name: "another label", refusal: "with no other label",
			do: create(certapiLike("certapi-ca-4444444444444444", func(x *certificatesv1.CertificateSigningRequest) { x.Labels["app"] = "web" }))},
		{name: "an annotation cert-manager reads", refusal: "no other annotation",
			do: create(certapiLike("certapi-ca-5555555555555555", func(x *certificatesv1.CertificateSigningRequest) {
				x.Annotations["experimental.cert-manager.io/private-key-secret-name"] = "org-root"
			}))},
		{name: "not a CA request", refusal: `annotated experimental.cert-manager.io/request-is-ca "true"`,
			do: create(certapiLike("certapi-ca-6666666666666666", func(x *certificatesv1.CertificateSigningRequest) { x.Annotations = nil }))},
		{name: "an owner reference", refusal: "no owner references",
			do: create(certapiLike("certapi-ca-7777777777777777", func(x *certificatesv1.CertificateSigningRequest) {
				x.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "x", UID: "0a1b"}}
			}))},
		{name: "another name", refusal: "certapi-ca-<16 hex digits of its key ID>",
			do: create(certapiLike("web-client", nil))},
		{name: "a client usage", refusal: "exactly the usages cert sign, crl sign and server auth",
			do: create(certapiLike("certapi-ca-8888888888888888", func(x *certificatesv1.CertificateSigningRequest) {
				x.Spec.Usages = append(x.Spec.Usages, certificatesv1.UsageClientAuth)
			}))},
		{name: "no server auth", refusal: "exactly the usages cert sign, crl sign and server auth",
			do: create(certapiLike("certapi-ca-9999999999999999", func(x *certificatesv1.CertificateSigningRequest) { x.Spec.Usages = x.Spec.Usages[:2] }))},
		{name: "deleting another's request", refusal: "delete only the CertificateSigningRequests it made",
			do: func(ctx context.Context) error { return saCSRs.Delete(ctx, theirs.Name, metav1.DeleteOptions{}) }},
		// No update of any kind: RBAC refuses it before the policy could.
		{name: "approving a request", byRBAC: true, refusal: `cannot update resource "certificatesigningrequests/approval"`,
			do: func(ctx context.Context) error {
				_, err := saCSRs.UpdateApproval(ctx, theirs.Name, theirs, metav1.UpdateOptions{})
				return err
			}},
		{name: "writing a request's status", byRBAC: true, refusal: `cannot update resource "certificatesigningrequests/status"`,
			do: func(ctx context.Context) error {
				_, err := saCSRs.UpdateStatus(ctx, theirs, metav1.UpdateOptions{})
				return err
			}},
		{name: "relabelling another's request", byRBAC: true, refusal: `cannot patch resource "certificatesigningrequests"`,
			do: func(ctx context.Context) error {
				_, err := saCSRs.Patch(ctx, theirs.Name, "application/merge-patch+json", []byte(`{"metadata":{"labels":{"certapi.dev/ca-request":"true"}}}`), metav1.PatchOptions{})
				return err
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do(ctx)
			switch {
			case tc.refusal == "":
				if err != nil {
					t.Fatalf("certapi's ServiceAccount may no longer make a write certapi makes: %v", err)
				}
			case tc.byRBAC:
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.refusal) {
					t.Fatalf("certapi's ServiceAccount: %v; want 403 from RBAC saying %q", err, tc.refusal)
				}
			default:
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+csrPolicy+"'") || !strings.Contains(err.Error(), tc.refusal) {
					t.Fatalf("certapi's ServiceAccount: %v; want 403 from the policy that says %q", err, tc.refusal)
				}
			}
		})
	}
	// certapi's own kind of request, created with its token, is still deletable with it; another's is
	// still there.
	if err := saCSRs.Delete(ctx, own, metav1.DeleteOptions{}); err != nil {
		t.Errorf("certapi's ServiceAccount deleting a request labelled certapi.dev/ca-request=true: %v", err)
	}
	if _, err := csrs.Get(ctx, theirs.Name, metav1.GetOptions{}); err != nil {
		t.Errorf("another user's request after the refused delete: %v", err)
	}
}

// waitCertapiCSR waits for the CertificateSigningRequest certapi makes for p, and checks that certapi's
// ServiceAccount made it, for csrSigner.
func waitCertapiCSR(ctx context.Context, t *testing.T, r *certapiRun, kube kubernetes.Interface, p *certapiv1alpha1.CertificateAuthorityPendingRequest) *certificatesv1.CertificateSigningRequest {
	t.Helper()
	if p.CertificateSigningRequest == "" {
		t.Fatalf("status.pendingRequest names no CertificateSigningRequest: %+v", p)
	}
	var csr *certificatesv1.CertificateSigningRequest
	r.waitFor(ctx, "CertificateSigningRequest "+p.CertificateSigningRequest, time.Minute, func(ctx context.Context) (bool, error) {
		x, err := kube.CertificatesV1().CertificateSigningRequests().Get(ctx, p.CertificateSigningRequest, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		csr = x
		return true, nil
	})
	if want := "system:serviceaccount:certapi-system:certapi"; csr.Spec.Username != want || csr.Spec.SignerName != csrSigner || string(csr.Spec.Request) != p.Request {
		t.Fatalf("CertificateSigningRequest %s: requested by %s for %s; want %s for %s, with the pending request", csr.Name, csr.Spec.Username, csr.Spec.SignerName, want, csrSigner)
	}
	return csr
}

// renderChart renders the chart as the base is rendered (hack/manifests/plain-values.yaml, release certapi
// in certapi-system) with more helm arguments.
func renderChart(t *testing.T, root string, args ...string) []*unstructured.Unstructured {
	t.Helper()
	helm, err := framework.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err := e2etest.Run(t, helm, append([]string{"template", "certapi", filepath.Join(root, "artifacts/charts/certapi"), "-n", "certapi-system",
		"-f", filepath.Join(root, "hack/manifests/plain-values.yaml")}, args...)...)
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, errOut)
	}
	objs, err := framework.DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}
