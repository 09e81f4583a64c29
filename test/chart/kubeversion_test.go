package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"

	"github.com/certapi/certapi/test/framework"
)

// TestKubeVersion checks Chart.yaml's kubeVersion against a real kube-apiserver: the one of `make tools`
// reports the version of the k8s.io/kubernetes module it is built from (hack/build-tools.sh stamps it, as
// Kubernetes' own builds do; unstamped it says v0.0.0-master, which the constraint refuses), helm accepts
// it for the chart, and helm refuses the chart for a Kubernetes older than 1.30.
func TestKubeVersion(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "hack", "tools", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("hack/tools/go.mod requires no k8s.io/kubernetes")
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v.GitVersion != string(m[1]) {
		t.Errorf("kube-apiserver reports %s (%s.%s), want %s, the version of k8s.io/kubernetes it is built from: rebuild it with `make tools`", v.GitVersion, v.Major, v.Minor, m[1])
	}

	// Against the server: helm reads its version and checks kubeVersion before rendering.
	r := runHelm(t, "template", release, chartDir, "--namespace", "certapi", "--validate")
	if r.err != nil {
		t.Errorf("helm template --validate against kube-apiserver %s: %v\n%s", v.GitVersion, r.err, r.stderr)
	}
	for _, tc := range []struct {
		kube   string
		refuse bool
	}{
		{"v1.29.9", true},
		{"v1.30.0", false},
		{"v1.31.2-eks-7f9249a", false},
		{v.GitVersion, false},
	} {
		r := runHelm(t, "template", release, chartDir, "--namespace", "certapi", "--kube-version", tc.kube)
		switch {
		case tc.refuse && (r.err == nil || !strings.Contains(r.stderr, "kubeVersion")):
			t.Errorf("helm template --kube-version %s: %v, stderr %q; want a refusal naming kubeVersion", tc.kube, r.err, r.stderr)
		case !tc.refuse && r.err != nil:
			t.Errorf("helm template --kube-version %s: %v\n%s", tc.kube, r.err, r.stderr)
		}
	}
}
