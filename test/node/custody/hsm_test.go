package custody

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

// TestCustodyChart runs the page's install with both of its custody choices at once, as the page says
// they combine: the CA keys in a PKCS#11 token (caKeyPlugin: each of the three pods runs the plugin as a
// sidecar over one SoftHSM2 token on a ReadWriteMany claim) and certapi as an intermediate of an
// organisation's root signed through a CertificateSigningRequest signer (the chart's RBAC and admission
// policy for certapi's requests in force; the test approves and signs as the organisation would).
//
// (a) certapi's first CA and the request to replace it have their keys in the token; signed, the request's
// key becomes the Active intermediate's and the first CA's key is destroyed. (b) The example webhook
// (pkg/servingcert, its own manifests) serves a chain holding the intermediate, and kube-apiserver calls
// it through the injected bundle, the root. Then, under issuance load and kube-apiserver's calls of the
// webhook, none failing: (c) the leader's pod deleted at once, another pod's plugin signs with the same
// key; (d) a rotation's request, whose key is made in the token, signed by hand with the page's commands
// (kubectl certapi ca request, openssl, kubectl certapi ca import): the old key destroyed at the switch and
// certapi's own request that nobody needs any more deleted. (e) A distrust replaces the intermediate at
// once and destroys its key. No log holds key material.
func TestCustodyChart(t *testing.T) {
	ctx := context.Background()
	kube, certapi := nodetest.Clients(t, cp)
	shell := prepare(t, "custody-data")
	t.Cleanup(func() {
		if t.Failed() {
			for i := range 3 {
				out, _ := nodetest.KubectlErr(cp, "-n", ns, "logs", fmt.Sprintf("certapi-%d", i), "-c", "ca-key-plugin", "--tail=30")
				t.Logf("certapi-%d's ca-key-plugin, last lines:\n%s", i, out)
			}
		}
	})

	// The token, on the claim the pods share, and the PIN in the file the page names.
	hsm := softHSMClaim(t)
	pin, err := os.ReadFile(hsm.PINFile)
	if err != nil {
		t.Fatal(err)
	}
	// The organisation's root, in the ConfigMap the page's values mount; its certificate and key in the
	// files the page's openssl command names.
	root := signertest.NewRoot(t, "Example Org Root", time.Now())
	rootKey, err := signer.EncodeKeyPEM(root.Key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "org-roots"},
		Data: map[string]string{"roots.pem": string(root.PEM())}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The page's install as written, with its two values blocks in the file it names: the node's image of
	// the plugin (never pulled) and this machine's module, and a short rotation grace.
	keyValues := nodetest.Block(t, page, "key-plugin-values")
	for _, want := range []string{pageImage, "  enabled: true\n", "module: " + pageModule + "\n"} {
		if !strings.Contains(keyValues, want) {
			t.Fatalf("%s's key-plugin-values block does not hold %q, which the test replaces:\n%s", page, want, keyValues)
		}
	}
	keyValues = strings.NewReplacer(pageImage, images["plugin"], "  enabled: true\n", "  enabled: true\n  imagePullPolicy: Never\n",
		"module: "+pageModule+"\n", "module: "+module+"\n").Replace(keyValues)
	csrValues := nodetest.Block(t, page, "csr-values")
	if !strings.Contains(csrValues, "--ca-upstream-signer-name="+pageSigner) {
		t.Fatalf("%s's csr-values block does not ask %s, for which the test signs:\n%s", page, pageSigner, csrValues)
	}
	writeFiles(t, shell.Dir, map[string][]byte{
		"key-plugin-values.yaml": mergeValues(t, keyValues, csrValues, "rotation:\n  grace: 10s\n"),
		"hsm-pin.txt":            pin, "org-root.crt": root.PEM(), "org-root.key": rootKey,
	})
	start := time.Now()
	shell.Run(t, page, 10*time.Minute, "key-plugin-install")
	waitInstalled(t, "the page's install with caKeyPlugin and an upstream signer", start)

	// An observer of the token: a plugin of the test's own on the same files, to list the CA keys.
	observerDir := t.TempDir()
	observer, err := framework.StartKeyPlugin(ctx, hsm, filepath.Join(observerDir, "keys.sock"), filepath.Join(observerDir, "observer.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = observer.Stop(10 * time.Second) })

	// (a) The first CA's key and the request's key in the token; the request signed, the first CA's key goes.
	bootstrap := activeSerial(t, certapi)
	first := e2etest.PendingRequest(t, certapi, signer.PendingSelfSigned)
	both := tokenKeys(t, observer, 2)
	csr := certapiCSR(t, kube, first)
	if err := e2etest.SignCSR(ctx, kube, csr, root.Sign(t, csr.Spec.Request, time.Now(), signertest.SignOptions{})); err != nil {
		t.Fatal(err)
	}
	intermediate := waitImported(t, certapi, root, bootstrap)
	keys := tokenKeys(t, observer, 1)
	if !slices.Contains(both, keys[0]) {
		t.Fatalf("the intermediate's key %v is not one of the two the token held, %v", keys, both)
	}

	// (b) The example webhook, served from the intermediate and called by kube-apiserver through the root.
	setImages := map[string]string{"ghcr.io/certapi/example-webhook": images["example-webhook"]}
	nodetest.Kubectl(t, cp, "apply", "-k", nodetest.Kustomization(t, "artifacts/examples/webhook/manifests", setImages, ""))
	t.Cleanup(func() {
		_, _ = nodetest.KubectlErr(cp, "delete", "--ignore-not-found", "-k", nodetest.RepoPath(t, "artifacts/examples/webhook/manifests"), "--wait=false")
	})
	nodetest.WaitFor(t, 3*time.Minute, "both webhook pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, webhookNS, webhookSelector, 2)
	})
	const validated = "custody-validated"
	nodetest.Kubectl(t, cp, "create", "namespace", validated)
	t.Cleanup(func() {
		_, _ = nodetest.KubectlErr(cp, "delete", "--ignore-not-found", "namespace", validated, "--wait=false")
	})
	nodetest.Kubectl(t, cp, "label", "namespace", validated, "example.certapi.dev/validate=enabled")
	webhookDenies(t, kube, validated)
	nodetest.Kubectl(t, cp, "create", "servingcertrequest", "chain", "-n", validated, "--service=chain")
	chainedTo(t, certapi, validated, root, intermediate)
	l := nodetest.StartLoad(t, certapi, validated, "chain")
	calls := callWebhook(t, kube, validated)

	// (c) The leader's pod deleted at once: another pod's plugin signs with the same key.
	leader := nodetest.LeaderPod(t, cp)
	start = time.Now()
	nodetest.Kubectl(t, cp, "-n", ns, "delete", "pod", leader, "--force", "--grace-period=0")
	nodetest.WaitFor(t, 2*time.Minute, "another replica leading", func(context.Context) (bool, string) {
		who, err := nodetest.LeaderOf(cp)
		return err == nil && who != "" && who != leader, fmt.Sprintf("leader %q, %v", who, err)
	})
	chainedTo(t, certapi, validated, root, intermediate)
	t.Logf("figure: the leader's pod deleted with --force --grace-period=0, another leader signing through its own plugin after %s: %s",
		time.Since(start).Round(100*time.Millisecond), l.Check(t, "the leader's pod deleted at once"))
	if got := tokenKeys(t, observer, 1); !slices.Equal(got, keys) {
		t.Errorf("the token's CA keys after the leader's death: %v; want the same one, %v", got, keys)
	}
	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})

	// (d) A rotation's request, its key made in the token, signed by hand with the page's commands.
	e2etest.UpdateCA(t, certapi, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.ForceRotation = "custody-node-1" })
	next := e2etest.PendingRequest(t, certapi, signer.PendingForceRotation)
	unneeded := certapiCSR(t, kube, next)
	withNext := tokenKeys(t, observer, 2)
	start = time.Now()
	shell.Run(t, page, 2*time.Minute, "ca-request", "ca-sign-openssl", "ca-import")
	rotated := waitImported(t, certapi, root, intermediate)
	rotatedKeys := tokenKeys(t, observer, 1)
	if slices.Equal(rotatedKeys, keys) || !slices.Contains(withNext, rotatedKeys[0]) {
		t.Fatalf("after the rotation the token holds %v; want the Next key of %v, not the old %v", rotatedKeys, withNext, keys)
	}
	t.Logf("figure: a rotation's request signed by hand with the page's commands to the new intermediate Active and the old key destroyed: %s; %s",
		time.Since(start).Round(time.Second), l.Check(t, "the rotation signed by hand"))
	nodetest.WaitFor(t, time.Minute, "certapi to delete its request "+unneeded.Name+" that no key waits for", func(ctx context.Context) (bool, string) {
		_, err := kube.CertificatesV1().CertificateSigningRequests().Get(ctx, unneeded.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
	chainedTo(t, certapi, validated, root, rotated)
	n, failed := calls()
	if bad := certificateFailures(failed); n == 0 || len(bad) > 0 || len(failed)*2 > n {
		t.Errorf("kube-apiserver's calls of the webhook across the leader's death and the rotation: %d; failed for a certificate %v; failed in all %d: %v", n, bad, len(failed), failed)
	} else {
		t.Logf("figure: kube-apiserver called the webhook %d times across the leader's death and the rotation, none failed for its certificate; failed otherwise (timeouts, no Ready endpoint): %d", n, len(failed))
	}
	webhookDenies(t, kube, validated)

	// (e) A distrust: a self-signed CA signs at once (its key, and the request to replace it, in the
	// token), and the distrusted intermediate's key is destroyed.
	e2etest.UpdateCA(t, certapi, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.Distrust = "custody-node-drill" })
	replaced := newActive(t, certapi, rotated)
	if got := tokenKeys(t, observer, 2); slices.Contains(got, rotatedKeys[0]) {
		t.Fatalf("after the distrust the token still holds the distrusted key %v: %v", rotatedKeys, got)
	}
	e2etest.IssuedBy(t, certapi, validated, "chain", replaced)
	l.Check(t, "the distrust")
	l.Stop()

	for i := range 3 {
		for _, c := range []string{"certapi", "ca-key-plugin"} {
			out, _ := nodetest.KubectlErr(cp, "-n", ns, "logs", fmt.Sprintf("certapi-%d", i), "-c", c)
			if strings.Contains(out, "PRIVATE KEY") {
				t.Errorf("certapi-%d's %s logs key material", i, c)
			}
		}
	}
}

// softHSMClaim makes a SoftHSM2 token on a directory of the node and the ReadWriteMany claim
// certapi-softhsm of the page's values on it, as a storage system would provision it (owned by the pods'
// user); the pods find the token through a configuration file of their own on the claim.
func softHSMClaim(t *testing.T) *framework.SoftHSM {
	t.Helper()
	volume := filepath.Join(cp.ClusterNode.Dir, "volumes", "softhsm")
	hsm, err := framework.NewSoftHSMTokens(context.Background(), t.TempDir(), filepath.Join(volume, "tokens"), "certapi")
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("directories.tokendir = %s/tokens\nobjectstore.backend = file\nlog.level = INFO\nslots.removable = false\n", podTokenDir)
	if err := os.WriteFile(filepath.Join(volume, "softhsm2.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := chownTree(volume, 65532); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = nodetest.KubectlErr(cp, "delete", "--ignore-not-found", "--wait=false", "pv", "custody-softhsm")
	})
	apply(t, fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: custody-softhsm}
spec:
  capacity: {storage: 64Mi}
  accessModes: [ReadWriteMany]
  persistentVolumeReclaimPolicy: Retain
  claimRef: {namespace: %[1]s, name: certapi-softhsm}
  hostPath: {path: %[2]s}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: certapi-softhsm, namespace: %[1]s}
spec:
  accessModes: [ReadWriteMany]
  storageClassName: ""
  volumeName: custody-softhsm
  resources: {requests: {storage: 64Mi}}
`, ns, volume))
	return hsm
}

// mergeValues merges Helm values files, later ones over earlier ones as `helm -f a -f b` does, except
// that lists are joined (both blocks of the page add extraVolumes).
func mergeValues(t *testing.T, docs ...string) []byte {
	t.Helper()
	merged := map[string]any{}
	for _, d := range docs {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(d), &m); err != nil {
			t.Fatalf("values %q: %v", d, err)
		}
		mergeInto(merged, m)
	}
	out, err := yaml.Marshal(merged)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mergeInto(dst, src map[string]any) {
	for k, v := range src {
		switch sv := v.(type) {
		case map[string]any:
			if dv, ok := dst[k].(map[string]any); ok {
				mergeInto(dv, sv)
				continue
			}
		case []any:
			if dv, ok := dst[k].([]any); ok {
				dst[k] = append(dv, sv...)
				continue
			}
		}
		dst[k] = v
	}
}
