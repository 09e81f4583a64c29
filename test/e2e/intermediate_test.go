package e2e

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/docs/markdown"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// waitActive waits until serial is the Active CA, and no request is pending.
func waitActive(t *testing.T, c versioned.Interface, serial string) {
	t.Helper()
	e2etest.Eventually(t, 60*time.Second, "the imported CA "+serial+" to be Active", func(context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		return ca.Status.Active != nil && ca.Status.Active.SerialNumber == serial && ca.Status.PendingRequest == nil &&
			meta.FindStatusCondition(ca.Status.Conditions, certapiv1alpha1.ConditionAwaitingSignature) == nil, nil
	})
}

// servedBy returns the leaf the webhook serves now and how many certificates it serves.
func servedBy(t *testing.T, w *webhookServer) (*x509.Certificate, int) {
	t.Helper()
	cert, err := w.source.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf, len(cert.Certificate)
}

// pageBlocks returns a function that runs the shell block of page marked <!-- docs-check: NAME --> as
// written, with bash -e in dir, the plugin built for the test first on PATH and kubectl last, and
// returns what it printed.
func (r *pluginRunner) pageBlocks(t *testing.T, page, dir string) func(name string) string {
	repo, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return func(name string) string {
		t.Helper()
		body, err := markdown.BlockBody(filepath.Join(repo, page), name)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "-e", "-c", body)
		cmd.Dir = dir
		cmd.Env = append(slices.Clone(r.env), "PATH="+pathOf(r.env)+string(os.PathListSeparator)+filepath.Dir(e2etest.KubectlPath(t)))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s, block %s:\n%s\n%v\n%s", page, name, body, err, out)
		}
		return string(out)
	}
}

// pathOf is the PATH of env.
func pathOf(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "PATH="); ok {
			return v
		}
	}
	return ""
}

// TestIntermediateByHand runs certapi as an intermediate of an organisation's root made here, by hand:
// the CA certificate request read with `kubectl certapi ca request`, signed by the root, refused when
// it is wrong (each refusal a 422 listing the reasons, nothing changed), imported with `kubectl certapi
// ca import`; then a webhook served from certapi's intermediate and called by kube-apiserver through
// the injected bundle (the root), and a rotation whose request waits, then is signed and imported,
// while the webhook keeps being called. Imports reach either of two replicas.
func TestIntermediateByHand(t *testing.T) {
	// Two replicas behind the framework's round-robin proxy: an import that reaches the follower is handed
	// to the leader through etcd, as a signing request is.
	own := framework.StartT(t, framework.Options{
		CertapiReplicas:    2,
		CertapiReplicaArgs: framework.LeaderIdentityArgs,
		CertapiArgs:        []string{"--ca-upstream=Manual", "--rotation-grace=2s", "--max-certificate-duration=20s"},
	})
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	runner := newPluginRunnerFor(t, buildPluginNamed(t, "kubectl-certapi"), own.Kubeconfig)
	run := runner.kubectl
	certapi := func(args ...string) pluginRun { t.Helper(); return run(append([]string{"certapi"}, args...)...) }
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	root := signertest.NewRoot(t, "Example Org Root", time.Now())
	rootFile := write("root.crt", root.PEM())
	bootstrap := e2etest.ActiveSerial(t, own)

	// The first CA is certapi's own self-signed one; the request to replace it is published at once.
	first := e2etest.PendingRequest(t, c, signer.PendingSelfSigned)
	csr := []byte(certapi("ca", "request").succeeded(t).stdout)
	if string(csr) != first.Request || !strings.Contains(string(csr), "BEGIN CERTIFICATE REQUEST") {
		t.Fatalf("kubectl certapi ca request printed\n%s\nwant status.pendingRequest.request", csr)
	}
	if out := certapi("ca", "request", "-o", "json").succeeded(t).stdout; !strings.Contains(out, `"reason": "ReplaceSelfSigned"`) || !strings.Contains(out, `"waitingFor"`) {
		t.Fatalf("ca request -o json:\n%s", out)
	}

	t.Run("refused imports change nothing", func(t *testing.T) {
		otherKey := signertest.ECKey(t, elliptic.P256())
		otherCSR, err := signer.IntermediateRequest(otherKey, signer.IntermediateOptions{ClusterDomain: signertest.ClusterDomain})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		for _, tc := range []struct {
			name   string
			cert   []byte
			reason signer.ImportReason
		}{
			{"wrong key", root.Sign(t, otherCSR, now, signertest.SignOptions{}), signer.ReasonKeyMismatch},
			{"not a CA", root.Sign(t, csr, now, signertest.SignOptions{NotCA: true}), signer.ReasonNotCA},
			{"constraints too wide", root.Sign(t, csr, now, signertest.SignOptions{NoNameConstraints: true}), signer.ReasonNameConstraints},
			{"too short", root.Sign(t, csr, now, signertest.SignOptions{NotAfter: now.Add(2 * time.Hour)}), signer.ReasonExpiresTooSoon},
		} {
			t.Run(tc.name, func(t *testing.T) {
				certapi("ca", "import", "--certificate="+write("bad.crt", tc.cert), "--chain="+rootFile).
					failedWith(t, "the CA certificate was refused", string(tc.reason)+": ")
				// Through the API: 422, the reason as a cause.
				_, err := c.CertapiV1alpha1().CertificateAuthorities().Import(ctx, "default", &certapiv1alpha1.CertificateAuthorityImport{
					Spec: certapiv1alpha1.CertificateAuthorityImportSpec{Certificate: string(tc.cert), Chain: string(root.PEM())}}, metav1.CreateOptions{})
				var se *apierrors.StatusError
				if !errors.As(err, &se) || se.ErrStatus.Code != 422 || se.ErrStatus.Details == nil {
					t.Fatalf("import: %v; want a 422 with causes", err)
				}
				var found bool
				for _, cause := range se.ErrStatus.Details.Causes {
					found = found || cause.Type == metav1.CauseType(tc.reason)
				}
				if !found {
					t.Fatalf("the 422 lacks a cause of type %s: %+v", tc.reason, se.ErrStatus.Details.Causes)
				}
				ca := e2etest.CAObject(t, c)
				if p := ca.Status.PendingRequest; p == nil || p.Request != first.Request || ca.Status.Active.SerialNumber != bootstrap || roles(ca)[certapiv1alpha1.CARoleNext] != 0 {
					t.Fatalf("a refused import changed the CA: active %s, pending %v, roles %v", ca.Status.Active.SerialNumber, p != nil, roles(ca))
				}
			})
		}
		// Nothing in the body: a clear 422 too.
		certapi("ca", "import", "--certificate="+write("empty.crt", nil)).failedWith(t, "spec.certificate is empty")
	})

	// The good one: a dry run first, then the import; the CA becomes Next, then Active.
	signed := write("certapi-ca.crt", root.Sign(t, csr, time.Now(), signertest.SignOptions{}))
	if out := certapi("ca", "import", "--certificate="+signed, "--chain="+rootFile, "--dry-run").succeeded(t).stdout; !strings.Contains(out, "would import") {
		t.Fatalf("dry run: %s", out)
	}
	if ca := e2etest.CAObject(t, c); ca.Status.PendingRequest == nil {
		t.Fatal("a dry-run import took the pending request")
	}
	out := certapi("ca", "import", "--certificate="+signed, "--chain="+rootFile).succeeded(t).stdout
	if !strings.Contains(out, "imported the CA certificate") || !strings.Contains(out, "Example Org Root") || !strings.Contains(out, "as the Next CA") {
		t.Fatalf("ca import printed:\n%s", out)
	}
	first1 := strings.Fields(strings.TrimPrefix(out, "imported the CA certificate "))[0]
	waitActive(t, c, first1)
	// A second import of the same certificate: nothing waits for it.
	certapi("ca", "import", "--certificate="+signed, "--chain="+rootFile).failedWith(t, "no CA certificate request is waiting for a signature")
	// The bundle carries the organisation's root (--ca-bundle-anchor=Root, the default), and the
	// bootstrap CA while it retires.
	e2etest.Eventually(t, 60*time.Second, "the bundle to hold the root and no longer the bootstrap CA", func(context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		return ca.Status.CABundle == string(root.PEM()), nil
	})

	// A webhook served from the intermediate, called by kube-apiserver through the injected root.
	w := startWebhook(t, own, ns, "guard", admissionHandler(t))
	registerValidatingWebhook(t, kube, w)
	calledNow := func(what string) {
		t.Helper()
		before := w.calls.Load()
		e2etest.Eventually(t, 30*time.Second, what, func(ctx context.Context) (bool, error) {
			_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("allow-%d", time.Now().UnixNano())), metav1.CreateOptions{})
			return err == nil && w.calls.Load() > before, nil
		})
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("deny-me"), metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "denied by the certapi test webhook") {
			t.Fatalf("a ConfigMap the webhook denies: %v, want the webhook's denial", err)
		}
	}
	calledNow("the webhook served from the intermediate to be called")
	if leaf, chain := servedBy(t, w); !strings.HasPrefix(leaf.Issuer.CommonName, signer.CACommonNamePrefix) || chain != 2 {
		t.Fatalf("the webhook serves a certificate of %q with %d certificates; want certapi's intermediate and the leaf served with it", leaf.Issuer, chain)
	}

	// A rotation: the request for the Next CA waits for its signature; meanwhile everything works.
	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.ForceRotation = "e2e-intermediate-1" })
	next := e2etest.PendingRequest(t, c, signer.PendingForceRotation)
	if ca := e2etest.CAObject(t, c); ca.Status.Active.SerialNumber != first1 || roles(ca)[certapiv1alpha1.CARoleNext] != 0 {
		t.Fatalf("while the request waits: active %s, roles %v", ca.Status.Active.SerialNumber, roles(ca))
	}
	calledNow("the webhook to be called while the Next CA's request waits")
	// The next request goes the way docs/ca-custody.md says, block by block as written: printed with
	// the plugin, signed by openssl as the organisation's root, checked and imported with the plugin.
	pageDir := t.TempDir()
	keyPEM, err := signer.EncodeKeyPEM(root.Key)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"org-root.crt": root.PEM(), "org-root.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(pageDir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	page := runner.pageBlocks(t, "docs/ca-custody.md", pageDir)
	page("ca-request")
	if csrFile, err := os.ReadFile(filepath.Join(pageDir, "certapi-ca.csr")); err != nil || string(csrFile) != next.Request || next.Request == first.Request {
		t.Fatalf("the page's ca request wrote %q (%v); want the Next CA's request", csrFile, err)
	}
	page("ca-sign-openssl")
	out = page("ca-import")
	if !strings.Contains(out, "would import (dry run)") || !strings.Contains(out, "imported the CA certificate") {
		t.Fatalf("the page's import printed:\n%s", out)
	}
	second := strings.Fields(out[strings.Index(out, "imported the CA certificate ")+len("imported the CA certificate "):])[0]
	waitActive(t, c, second)
	// The webhook re-issues from the new Active CA and is still called.
	e2etest.Eventually(t, 30*time.Second, "the webhook to serve a certificate of the new intermediate", func(context.Context) (bool, error) {
		leaf, _ := servedBy(t, w)
		return signer.FormatKeyID(leaf.AuthorityKeyId) == e2etest.CAObject(t, c).Status.Active.SubjectKeyID, nil
	})
	calledNow("the webhook to be called after the switch to the new intermediate")
	if ca := e2etest.CAObject(t, c); ca.Status.CABundle != string(root.PEM()) {
		t.Fatalf("after the rotation the bundle is\n%s\nwant the root alone", ca.Status.CABundle)
	}
}
