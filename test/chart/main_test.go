// Package chart tests the Helm chart artifacts/charts/certapi with the helm built by `make tools`
// (hack/tools/helm) against a real kube-apiserver and etcd from test/framework: helm lint, every example
// values file rendered and applied with a server-side dry run, values that cannot work refused, and helm
// install followed by helm uninstall leaving nothing of certapi's behind but what the README says is kept;
// and all of that again with Helm 3 (hack/tools/helm3), which most clusters are installed with.
// No certapi runs here (no node runs pods either): what is tested is what the chart asks of the API.
package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
)

// cp is the control plane shared by the tests of this package: etcd and kube-apiserver, no certapi (the
// chart registers the APIService v1alpha1.certapi.dev itself).
var cp *framework.ControlPlane

// Paths of the binaries and of the chart, set by TestMain.
var (
	helmBin string
	// helm3Bin is Helm 3, which most clusters are installed with: TestHelm3 runs it.
	helm3Bin   string
	kubectlBin string
	chartDir   string
	examples   string
	// helmHome holds helm's cache, configuration and data, so that the tests touch nothing of the user's.
	helmHome string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := framework.RepoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	chartDir = filepath.Join(root, "artifacts", "charts", "certapi")
	examples = filepath.Join(root, "artifacts", "charts", "examples")
	if helmBin, err = framework.HelmBinary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if helm3Bin, err = framework.Helm3Binary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kubectlBin = os.Getenv("KUBECTL")
	if kubectlBin == "" {
		if kubectlBin, err = framework.KubectlBinary(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	dir, err := os.MkdirTemp("", "certapi-chart-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	helmHome = filepath.Join(dir, "helm")
	ctx, cancel := context.WithTimeout(context.Background(), framework.StartTimeout)
	defer cancel()
	cp = framework.StartMain(ctx, framework.Options{Dir: filepath.Join(dir, "cp"), SkipCertapi: true, Stdout: os.Stderr})
	if cp == nil {
		return 1
	}
	// The Prometheus Operator's kinds, which a bare kube-apiserver does not serve.
	crds := filepath.Join(root, "test", "chart", "testdata", "monitoring-crds.yaml")
	for _, args := range [][]string{
		{"apply", "--server-side", "-f", crds},
		{"wait", "--for=condition=Established", "--timeout=60s", "-f", crds},
	} {
		if out, err := command(ctx, kubectlBin, append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...); err != nil {
			fmt.Fprintf(os.Stderr, "kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
			cp.Stop()
			return 1
		}
	}
	code := m.Run()
	if code != 0 {
		framework.PrintLogTails(os.Stderr, cp.Logs())
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", dir)
	}
	cp.Stop()
	if code == 0 {
		_ = os.RemoveAll(dir)
	}
	return code
}

// command runs a binary and returns its standard output and standard error together.
func command(ctx context.Context, bin string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// result is what a command printed, apart.
type result struct {
	stdout, stderr string
	err            error
}

// runHelm runs helm (Helm 4) with the control plane's kubeconfig and a home of the tests' own.
func runHelm(t *testing.T, args ...string) result {
	t.Helper()
	return runHelmBin(t, helmBin, args...)
}

// runHelmBin runs the helm binary bin as runHelm does.
func runHelmBin(t *testing.T, bin string, args ...string) result {
	t.Helper()
	return runBin(t, bin, []string{
		"KUBECONFIG=" + cp.Kubeconfig,
		"HELM_CACHE_HOME=" + filepath.Join(helmHome, "cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(helmHome, "config"),
		"HELM_DATA_HOME=" + filepath.Join(helmHome, "data"),
	}, args...)
}

// runKubectl runs kubectl against the control plane.
func runKubectl(t *testing.T, args ...string) result {
	t.Helper()
	return runBin(t, kubectlBin, nil, append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
}

func runBin(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w", filepath.Base(bin), strings.Join(args, " "), err)
	}
	return result{stdout.String(), stderr.String(), err}
}

// must fails the test when the command failed, with what it printed.
func (r result) must(t *testing.T) string {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
	}
	return r.stdout
}
