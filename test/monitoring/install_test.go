package monitoring

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
	"github.com/certapi/certapi/test/testhelpers"
)

// operatorCRDs are the Prometheus Operator's CRDs of the kinds certapi's monitoring objects are: the
// ServiceMonitor and the PrometheusRule.
var operatorCRDs = []string{"servicemonitors", "prometheusrules"}

// installOperatorCRDs creates the Prometheus Operator's CRDs of operatorCRDs in cp's cluster, as the
// operator's own install does, from the operator's module (the version hack/tools/prometheus-operator
// builds prometheus-operator-config from: what hack/build-tools.sh prometheus downloaded), and waits for
// them to be served.
func installOperatorCRDs(t *testing.T, cp *framework.ControlPlane) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	list := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/prometheus-operator/prometheus-operator")
	list.Dir = filepath.Join(root, "hack", "tools", "prometheus-operator")
	list.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := list.Output()
	if err != nil {
		t.Fatalf("the Prometheus Operator's module (hack/build-tools.sh prometheus downloads it): %v", err)
	}
	mod := strings.TrimSpace(string(out))
	args := []string{"apply", "--server-side"}
	for _, crd := range operatorCRDs {
		args = append(args, "-f", filepath.Join(mod, "example", "prometheus-operator-crd", "monitoring.coreos.com_"+crd+".yaml"))
	}
	kubectl(t, cp, args...)
	for _, crd := range operatorCRDs {
		kubectl(t, cp, "wait", "--for=condition=Established", "--timeout=1m", "crd/"+crd+".monitoring.coreos.com")
	}
}

func kubectl(t *testing.T, cp *framework.ControlPlane, args ...string) string {
	t.Helper()
	bin, err := framework.KubectlBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestInstallMonitoring runs docs/install.md's block monitoring as it is written, in the repository's
// root, against a running certapi of its own (the other tests here make the objects of the chart's
// ServiceMonitor themselves), once the Prometheus Operator's CRDs are there (the page installs certapi's
// monitoring into a cluster that runs the operator): the ServiceMonitor, the PrometheusRule and the
// Prometheus RBAC apply, and kubectl certapi check --wait passes. Then the objects are there as applied.
func TestInstallMonitoring(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})
	installOperatorCRDs(t, cp)
	shell := nodetest.NewDocShell(t, cp)
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	shell.Dir = root
	out := shell.Run(t, "docs/install.md", 3*time.Minute, "monitoring")
	for _, want := range []string{"servicemonitor.monitoring.coreos.com/certapi", "prometheusrule.monitoring.coreos.com/certapi", "rolebinding.rbac.authorization.k8s.io/certapi:prometheus"} {
		if !strings.Contains(out, want) {
			t.Errorf("the monitoring block did not apply %s:\n%s", want, out)
		}
	}
	ns := framework.CertapiNamespace
	kubectl(t, cp, "-n", ns, "get", "servicemonitor/certapi", "prometheusrule/certapi", "role/certapi:prometheus")
	// The ServiceMonitor's tlsConfig reads certapi's CA from the ConfigMap the block made: certapi injects it.
	_, kube := testhelpers.Clients(t, cp.AdminConfig)
	testhelpers.Eventually(t, 200*time.Millisecond, 30*time.Second, "certapi to inject its CA into the ConfigMap certapi-ca", func(ctx context.Context) (bool, error) {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "certapi-ca", metav1.GetOptions{})
		return err == nil && strings.Contains(cm.Data["ca.crt"], "BEGIN CERTIFICATE"), nil
	})
}
