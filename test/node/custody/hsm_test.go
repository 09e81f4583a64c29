// Package custody runs the CA custody of docs/ca-custody.md on a control plane with a real node, as the
// page writes it: the CA keys in a PKCS#11 token through the chart's caKeyPlugin, three replicas (the
// chart's default, one etcd cluster of certapi's pods) each with its certapi-kms-pkcs11 sidecar reaching
// one SoftHSM2 token on a volume they share, in a namespace that enforces Pod Security "restricted".
package custody

import (
	"context"
	"crypto/elliptic"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

const (
	ns = "certapi-system"
	// selector selects certapi's pods.
	selector = "app.kubernetes.io/name=certapi,app.kubernetes.io/component=apiserver"
	// pluginImage is the test image of certapi-kms-pkcs11 with SoftHSM2's module: what the page asks a user
	// to build with their HSM's module.
	pluginImage = "certapi-test/certapi-kms-pkcs11-softhsm:dev"
	// page is the page whose values the test installs with.
	page = "docs/ca-custody.md"
	// pageImage is the plugin image the page's values name, which the test replaces with pluginImage.
	pageImage = "registry.example.com/certapi-kms-pkcs11-softhsm:v0.1.0"
	// pageModule is the module the page's values name: Debian's path of SoftHSM2's, replaced with this
	// machine's.
	pageModule = "/usr/lib/softhsm/libsofthsm2.so"
	// podTokenDir is where the page's values mount the token's volume in the plugin's container.
	podTokenDir = "/var/lib/softhsm"
)

var (
	cp     *framework.ControlPlane
	images = map[string]string{}
	// module is the path of SoftHSM2's PKCS#11 module, on this machine and in pluginImage.
	module string
)

func TestMain(m *testing.M) {
	os.Exit(nodetest.Run(m, "certapi-node-custody-", func(ctx context.Context, dir string) (map[string]string, error) {
		pluginArchive := filepath.Join(dir, "certapi-kms-pkcs11-softhsm.tar")
		if err := buildPluginImage(ctx, pluginArchive); err != nil {
			return nil, err
		}
		// certapi's own image is the release's, which the page's install loads.
		return map[string]string{"plugin": pluginArchive}, nil
	}, func(c *framework.ControlPlane, imgs map[string]string) { cp, images = c, imgs }))
}

// buildPluginImage packs certapi-kms-pkcs11 (make kms-plugin, built with cgo) as the image's entrypoint with
// the C library it links and SoftHSM2's module with the libraries it loads, each at its path on this
// machine: the image the page describes, with SoftHSM2 for the HSM's module.
func buildPluginImage(ctx context.Context, out string) error {
	bin, err := framework.KMSPluginBinary(ctx)
	if err != nil {
		return err
	}
	if module, err = framework.SoftHSMModule(); err != nil {
		return err
	}
	return framework.BuildBinaryImage(bin, "/usr/local/bin/certapi-kms-pkcs11", pluginImage, out, module)
}

// TestKeyPluginChart installs the chart with the page's caKeyPlugin values: three pods, each running the
// plugin as a sidecar over one SoftHSM2 token on a ReadWriteMany claim, under Pod Security "restricted".
// Under issuance load through kube-apiserver: (a) the token holds the one CA key, and certapi issues with
// it; (b) the leader's pod deleted at once, another pod's plugin signs with the same key, no call failing;
// (c) a rotation makes the Next key in the token and destroys the old one at the switch; (d) a distrust
// replaces the CA at once and destroys its key. No log holds key material.
func TestKeyPluginChart(t *testing.T) {
	ctx := context.Background()
	kube, certapi := nodetest.Clients(t, cp)
	nodetest.LogPodsOnFailure(t, cp, ns, 3)
	t.Cleanup(func() {
		if t.Failed() {
			for i := range 3 {
				out, _ := nodetest.KubectlErr(cp, "-n", ns, "logs", fmt.Sprintf("certapi-%d", i), "-c", "ca-key-plugin", "--tail=30")
				t.Logf("certapi-%d's ca-key-plugin, last lines:\n%s", i, out)
			}
		}
	})

	// The token, on the volume the pods share. A storage system would provision the claim; here it is a
	// directory of the node, whose pods find the token through their own configuration file on it.
	volume := filepath.Join(cp.ClusterNode.Dir, "volumes", "softhsm")
	hsm, err := framework.NewSoftHSMTokens(ctx, t.TempDir(), filepath.Join(volume, "tokens"), "certapi")
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

	nodetest.Kubectl(t, cp, "create", "namespace", ns)
	nodetest.EnforceRestricted(t, cp, ns)
	if err := cp.CreateEncryptionConfigSecret(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("custody-data-%d", i), "1Gi"); err != nil {
			t.Fatal(err)
		}
	}
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

	// The page's install as written, in a shell with the release's image loaded on the node (the README's
	// cluster-image block) and the files it names: the PIN, and the page's values with the node's image of
	// the plugin (never pulled) and a short rotation grace.
	values := nodetest.Block(t, page, "key-plugin-values")
	for _, want := range []string{pageImage, "  enabled: true\n", "module: " + pageModule + "\n"} {
		if !strings.Contains(values, want) {
			t.Fatalf("%s's key-plugin-values block does not hold %q, which the test replaces:\n%s", page, want, values)
		}
	}
	values = strings.NewReplacer(pageImage, images["plugin"], "  enabled: true\n", "  enabled: true\n  imagePullPolicy: Never\n",
		"module: "+pageModule+"\n", "module: "+module+"\n").Replace(values) + "rotation:\n  grace: 10s\n"
	shell := nodetest.NewDocShell(t, cp)
	pin, err := os.ReadFile(hsm.PINFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"key-plugin-values.yaml": []byte(values), "hsm-pin.txt": pin} {
		if err := os.WriteFile(filepath.Join(shell.Dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	shell.Run(t, "README.md", 10*time.Minute, "cluster-image")
	start := time.Now()
	shell.Run(t, page, 10*time.Minute, "key-plugin-install")
	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	nodetest.Kubectl(t, cp, "wait", "--for=condition=Available", "apiservice/"+certapiv1alpha1.APIServiceName, "--timeout=2m")
	t.Logf("figure: the page's install with caKeyPlugin to three pods Ready and the APIService Available: %s", time.Since(start).Round(time.Second))

	// An observer of the token: a plugin of the test's own on the same files, to list the CA keys.
	observerDir := t.TempDir()
	observer, err := framework.StartKeyPlugin(ctx, hsm, filepath.Join(observerDir, "keys.sock"), filepath.Join(observerDir, "observer.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = observer.Stop(10 * time.Second) })

	// (a) One key in the token, and certapi issues with the CA it signs for.
	serial := activeSerial(t, certapi)
	keys := tokenKeys(t, observer, 1)
	const loadNS = "custody"
	nodetest.Kubectl(t, cp, "create", "namespace", loadNS)
	nodetest.Kubectl(t, cp, "create", "servingcertrequest", "hsm", "-n", loadNS, "--service=hsm")
	issuedBy(t, certapi, loadNS, serial)
	l := nodetest.StartLoad(t, certapi, loadNS, "hsm")

	// (b) The leader's pod deleted at once: another pod's plugin signs with the same key.
	leader := nodetest.LeaderPod(t, cp)
	start = time.Now()
	nodetest.Kubectl(t, cp, "-n", ns, "delete", "pod", leader, "--force", "--grace-period=0")
	nodetest.WaitFor(t, 2*time.Minute, "another replica leading", func(context.Context) (bool, string) {
		who, err := nodetest.LeaderOf(cp)
		return err == nil && who != "" && who != leader, fmt.Sprintf("leader %q, %v", who, err)
	})
	issuedBy(t, certapi, loadNS, serial)
	t.Logf("figure: the leader's pod deleted with --force --grace-period=0, another leader signing through its own plugin after %s: %s",
		time.Since(start).Round(100*time.Millisecond), l.Check(t, "the leader's pod deleted at once"))
	if got := tokenKeys(t, observer, 1); !slices.Equal(got, keys) {
		t.Errorf("the token's CA keys after the leader's death: %v; want the same one, %v", got, keys)
	}
	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})

	// (c) A rotation: the Next key made in the token, the old one destroyed at the switch.
	start = time.Now()
	e2etest.UpdateCA(t, certapi, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.ForceRotation = "hsm-node-1" })
	rotated := newActive(t, certapi, serial)
	rotatedKeys := tokenKeys(t, observer, 1)
	if slices.Equal(rotatedKeys, keys) {
		t.Fatalf("after the rotation the token still holds only the old key %v", keys)
	}
	issuedBy(t, certapi, loadNS, rotated)
	t.Logf("figure: a rotation through the token to the new CA signing and the old key destroyed: %s; %s",
		time.Since(start).Round(time.Second), l.Check(t, "the rotation"))

	// (d) A distrust: a new CA at once, the distrusted CA's key destroyed.
	e2etest.UpdateCA(t, certapi, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.Distrust = "hsm-node-drill" })
	replaced := newActive(t, certapi, rotated)
	if got := tokenKeys(t, observer, 1); slices.Equal(got, rotatedKeys) {
		t.Fatalf("after the distrust the token still holds only the distrusted key %v", rotatedKeys)
	}
	issuedBy(t, certapi, loadNS, replaced)
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

// apply applies manifests with kubectl.
func apply(t *testing.T, manifests string) {
	t.Helper()
	if err := cp.KubectlIO(context.Background(), strings.NewReader(manifests), os.Stderr, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, manifests)
	}
}

// chownTree gives dir and everything under it to uid (and the group of the same number): the user of
// certapi's pods, as a storage system provisions a volume for them.
func chownTree(dir string, uid int) error {
	return filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, uid)
	})
}

// activeSerial waits until CertificateAuthority/default shows an Active CA and returns its serial.
func activeSerial(t *testing.T, c versioned.Interface) string {
	t.Helper()
	var serial string
	nodetest.WaitFor(t, time.Minute, "an Active CA", func(ctx context.Context) (bool, string) {
		ca := e2etest.CAObject(t, c)
		if ca.Status.Active == nil {
			return false, "none yet"
		}
		serial = ca.Status.Active.SerialNumber
		return true, ""
	})
	return serial
}

// newActive waits until the Active CA is another than old and no Next CA waits, and returns its serial.
func newActive(t *testing.T, c versioned.Interface, old string) string {
	t.Helper()
	var serial string
	nodetest.WaitFor(t, 3*time.Minute, "a new Active CA in place of "+old, func(ctx context.Context) (bool, string) {
		ca := e2etest.CAObject(t, c)
		if ca.Status.Active == nil || ca.Status.Active.SerialNumber == old {
			return false, "the Active CA is still " + old
		}
		for _, cert := range ca.Status.Certificates {
			if cert.Role == certapiv1alpha1.CARoleNext {
				return false, "a Next CA waits"
			}
		}
		serial = ca.Status.Active.SerialNumber
		return true, ""
	})
	return serial
}

// tokenKeys waits until the token holds n CA keys of certapi's, and returns their references, sorted.
func tokenKeys(t *testing.T, observer *framework.KMSPlugin, n int) []string {
	t.Helper()
	var refs []string
	nodetest.WaitFor(t, time.Minute, fmt.Sprintf("the token to hold %d CA key(s)", n), func(ctx context.Context) (bool, string) {
		keys, err := observer.ListCAKeys(ctx, issuer.CAKeyLabelPrefix)
		if err != nil {
			return false, err.Error()
		}
		refs = refs[:0]
		for _, k := range keys {
			refs = append(refs, k.Ref)
		}
		slices.Sort(refs)
		return len(refs) == n, fmt.Sprintf("%v", refs)
	})
	return slices.Clone(refs)
}

// issuedBy asks servingcerts for a certificate of ns/hsm and checks that the CA serial signed it.
func issuedBy(t *testing.T, c versioned.Interface, ns, serial string) {
	t.Helper()
	body := e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil)
	var out *certapiv1alpha1.ServingCert
	nodetest.WaitFor(t, time.Minute, "a certificate from servingcerts", func(ctx context.Context) (bool, string) {
		var err error
		out, err = c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "hsm", body, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if got := e2etest.IssuerSerialOf(t, out.Status.Certificate, out.Status.CABundle); got != serial {
		t.Fatalf("the certificate was signed by CA %s, want %s", got, serial)
	}
}
