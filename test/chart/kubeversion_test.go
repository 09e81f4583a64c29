package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"k8s.io/client-go/discovery"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
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
	// The tools module kube-apiserver was built from: hack/tools, or hack/tools/kube-<minor> under
	// `make test-matrix` ($KUBE_MINOR).
	module := filepath.Join("hack", "tools")
	if minor := os.Getenv(framework.EnvKubeMinor); minor != "" {
		module = filepath.Join(module, "kube-"+minor)
	}
	gomod, err := os.ReadFile(filepath.Join(root, module, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes (v\S+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatalf("%s/go.mod requires no k8s.io/kubernetes", module)
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

// TestClusterTrustBundlePolicyFollowsTheCluster: the chart installs the ValidatingAdmissionPolicy (and its
// binding) for certapi's ClusterTrustBundle only where certapi publishes one, a cluster that serves
// certificates.k8s.io/v1 ClusterTrustBundles: against kube-apiserver as its discovery says (run by `make
// test-matrix` on the older minors too), and without a cluster by the Kubernetes version helm is given
// (1.37 or later, which is helm's own default, the one artifacts/deploy is rendered with).
func TestClusterTrustBundlePolicyFollowsTheCluster(t *testing.T) {
	served, version := testhelpers.Served(t, cp.AdminConfig, "certificates.k8s.io/v1", "clustertrustbundles")
	const policy = "name: " + release + "-clustertrustbundles\n"
	for _, tc := range []struct {
		name string
		args []string
		want bool
	}{
		{name: "against kube-apiserver " + version, args: []string{"--validate"}, want: served},
		{name: "helm's default version", want: true},
		{name: "Kubernetes 1.37", args: []string{"--kube-version", "v1.37.0"}, want: true},
		{name: "Kubernetes 1.33", args: []string{"--kube-version", "v1.33.5"}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runHelm(t, append([]string{"template", release, chartDir, "--namespace", "certapi"}, tc.args...)...)
			if r.err != nil {
				t.Fatalf("helm template %v: %v\n%s", tc.args, r.err, r.stderr)
			}
			if got := strings.Count(r.stdout, policy); got != map[bool]int{true: 2, false: 0}[tc.want] {
				t.Errorf("helm template %v renders %q %d times; want the policy and its binding: %v", tc.args, strings.TrimSpace(policy), got, tc.want)
			}
		})
	}
}
