// Package custody runs the CA custody of docs/ca-custody.md on a control plane with a real node, as the
// page writes it: an install of the release's chart (three replicas, one etcd cluster of certapi's pods) in
// a namespace that enforces Pod Security "restricted", with the CA keys in a PKCS#11 token through
// caKeyPlugin (each pod's certapi-kms-pkcs11 sidecar reaching one SoftHSM2 token on a volume they share) and
// certapi an intermediate of an organisation's root, signed through a CertificateSigningRequest and by hand,
// with a webhook served from it and called by kube-apiserver.
package custody

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/issuer"
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
	// page is the page whose values and commands the tests run.
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
		webhookArchive, err := framework.ImageArchive("example-webhook.tar")
		if err != nil {
			return nil, err
		}
		// certapi's own image is the release's, which each install loads as the README says.
		return map[string]string{"plugin": pluginArchive, "example-webhook": webhookArchive}, nil
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

// prepare makes what an install of the chart needs before helm runs, as docs/install.md does, under a
// Pod Security "restricted" namespace: the namespace, the encryption Secret and the three members' volumes
// (named after the test); and removes the install, and what certapi made outside its release, when the
// test ends. It returns a DocShell with the release's image loaded on the node (the README's
// cluster-image block), in whose directory the test writes the files the page's commands name.
func prepare(t *testing.T, volumes string) *nodetest.DocShell {
	t.Helper()
	ctx := context.Background()
	// Cleanups run last first: the pods' logs are read before the namespace goes.
	t.Cleanup(func() { uninstall(t, volumes) })
	nodetest.LogPodsOnFailure(t, cp, ns, 3)
	nodetest.Kubectl(t, cp, "create", "namespace", ns)
	nodetest.EnforceRestricted(t, cp, ns)
	if err := cp.CreateEncryptionConfigSecret(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("%s-%d", volumes, i), "1Gi"); err != nil {
			t.Fatal(err)
		}
	}
	shell := nodetest.NewDocShell(t, cp)
	shell.Run(t, "README.md", 10*time.Minute, "cluster-image")
	return shell
}

// uninstall removes the release (helm uninstall: its APIService first, or the namespace's deletion would
// wait on the discovery of an API nobody serves any more), its namespace and claims, the members' volumes
// and what certapi made outside the release, so that the package's next test installs on a clean cluster.
func uninstall(t *testing.T, volumes string) {
	shell := nodetest.NewDocShell(t, cp)
	if out, err := shell.ScriptErr(5*time.Minute, "helm uninstall certapi -n "+ns+" --ignore-not-found --wait"); err != nil {
		t.Errorf("cleaning up: helm uninstall: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"delete", "--ignore-not-found", "apiservice", certapiv1alpha1.APIServiceName},
		{"delete", "--ignore-not-found", "namespace", ns, "--timeout=5m"},
		{"delete", "--ignore-not-found", "clustertrustbundle", certapiv1alpha1.ClusterTrustBundleName},
		{"delete", "--ignore-not-found", "pv", volumes + "-0", volumes + "-1", volumes + "-2"},
		{"delete", "--ignore-not-found", "certificatesigningrequests", "-l", certapiv1alpha1.LabelCARequest + "=true"},
	} {
		if out, err := nodetest.KubectlErr(cp, args...); err != nil {
			t.Errorf("cleaning up: kubectl %v: %v\n%s", args, err, out)
		}
	}
}

// waitInstalled waits until three certapi pods are Ready and the APIService Available, and logs how long
// that took since start.
func waitInstalled(t *testing.T, what string, start time.Time) {
	t.Helper()
	kube, _ := nodetest.Clients(t, cp)
	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	nodetest.Kubectl(t, cp, "wait", "--for=condition=Available", "apiservice/"+certapiv1alpha1.APIServiceName, "--timeout=2m")
	t.Logf("figure: %s to three pods Ready and the APIService Available: %s", what, time.Since(start).Round(time.Second))
}

// writeFiles writes files (name -> content) into dir.
func writeFiles(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
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
