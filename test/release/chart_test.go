package release

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
	"github.com/certapi/certapi/test/testhelpers"
)

// run runs bin and fails the test, with what it printed, unless it succeeds.
func run(t *testing.T, env []string, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestChartAndInstallYAML installs the packaged chart, verified against its provenance file, with Helm 4
// (docs/release.md's block install-chart, as written, in the release's directory, after the namespace and
// the encryption Secret) and with Helm 3 on a real kube-apiserver (no node: what is tested is what the chart
// asks of the API, as in test/chart), checks the release's chart and app versions and its default image,
// uninstalls it, then applies the install YAML (the block install-yaml) and checks that it pins the image
// index by digest.
func TestChartAndInstallYAML(t *testing.T) {
	cp := framework.StartT(t, framework.Options{SkipCertapi: true})
	helmBin, err := framework.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	kubectlBin := filepath.Join(root, "_output", "bin", "kubectl")
	home := t.TempDir()
	env := []string{"KUBECONFIG=" + cp.Kubeconfig, "HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	// The chart's default install, and so the install YAML: the StatefulSet of etcd.mode cluster.
	image := func(ns string) string {
		s, err := kube.AppsV1().StatefulSets(ns).Get(context.Background(), "certapi", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the certapi StatefulSet: %v", err)
		}
		return s.Spec.Template.Spec.Containers[0].Image
	}

	encFile := testhelpers.CAKeysEncryptionConfigFile(t)
	tgz := filepath.Join(dir, "certapi-"+chartVersion()+".tgz")
	_, indexDesc := imageLayout(t)
	helm3Bin, err := framework.Helm3Binary()
	if err != nil {
		t.Fatal(err)
	}
	// With Helm 4 and with Helm 3, which most clusters are installed with: each checks the chart's
	// provenance file against the release's keyring before it installs (docs/release.md).
	// The page's blocks run in a directory laid out as a user downloads the release, with helm (Helm 4)
	// and kubectl of _output/bin.
	shell := nodetest.NewDocShell(t, cp)
	shell.Dir = releaseDir(t)
	for _, h := range []struct{ name, bin, ns string }{{"Helm 4", helmBin, "certapi-system"}, {"Helm 3", helm3Bin, "certapi-helm3"}} {
		if h.name == "Helm 4" {
			// What the page says to make first: the namespace, restricted as the install makes it, and the
			// encryption Secret (install.md).
			run(t, nil, kubectlBin, "--kubeconfig", cp.Kubeconfig, "create", "namespace", h.ns)
			run(t, nil, kubectlBin, "--kubeconfig", cp.Kubeconfig, "label", "namespace", h.ns, "pod-security.kubernetes.io/enforce=restricted")
			run(t, nil, kubectlBin, "--kubeconfig", cp.Kubeconfig, "-n", h.ns, "create", "secret", "generic", "certapi-encryption-config", "--from-file=config.yaml="+encFile)
			shell.Run(t, "docs/release.md", 3*time.Minute, "install-chart")
		} else {
			run(t, env, h.bin, "install", "certapi", tgz, "--verify", "--keyring", filepath.Join(dir, "certapi-keyring.gpg"),
				"--namespace", h.ns, "--create-namespace", "--set-file", "encryption.config="+encFile)
		}
		var releases []struct {
			Name       string `json:"name"`
			Chart      string `json:"chart"`
			AppVersion string `json:"app_version"`
			Status     string `json:"status"`
		}
		if err := json.Unmarshal([]byte(run(t, env, h.bin, "list", "--namespace", h.ns, "--output", "json")), &releases); err != nil {
			t.Fatal(err)
		}
		if len(releases) != 1 || releases[0].Chart != "certapi-"+chartVersion() || releases[0].AppVersion != version || releases[0].Status != "deployed" {
			t.Errorf("%s: helm list: %+v, want certapi-%s, app version %s, deployed", h.name, releases, chartVersion(), version)
		}
		if got, want := image(h.ns), "ghcr.io/certapi/certapi:"+version; got != want {
			t.Errorf("%s: the chart's default image is %s, want %s", h.name, got, want)
		}
		run(t, env, h.bin, "uninstall", "certapi", "--namespace", h.ns, "--wait", "--timeout", "2m")
	}

	// The install YAML, as a user applies it.
	shell.Run(t, "docs/release.md", 3*time.Minute, "install-yaml")
	if got, want := image("certapi-system"), "ghcr.io/certapi/certapi@"+indexDesc.Digest.String(); got != want {
		t.Errorf("certapi.yaml runs %s, want the image index by digest, %s", got, want)
	}
}
