package manifests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// checkKeepEtcdQuorum runs on the control plane of TestManifestsRBACRunsCertapi, where the base's
// StatefulSet (three replicas; no node runs them) and its keep-etcd-quorum policy are applied for real. No
// one may take that StatefulSet from several replicas to one, by kubectl scale (the scale subresource), a
// patch, or an apply of a rendering made with `helm template --set replicas=1` (what a GitOps tool
// applies, where the chart's lookup guard does not run); scaling to 2, to 0 and from 0 to 1 (the
// documented restore into one member) stays allowed.
func checkKeepEtcdQuorum(t *testing.T, own *framework.ControlPlane) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	const refused = "a running cluster cannot be scaled down to one"
	kubectl := func(args ...string) (string, error) {
		t.Helper()
		out, errOut, err := e2etest.Run(t, e2etest.KubectlPath(t), append([]string{"--kubeconfig", own.Kubeconfig, "-n", "certapi-system"}, args...)...)
		return string(out) + errOut, err
	}
	replicas := func() string {
		t.Helper()
		out, err := kubectl("get", "statefulset", "certapi", "-o", "jsonpath={.spec.replicas}")
		if err != nil {
			t.Fatalf("kubectl get statefulset certapi: %v\n%s", err, out)
		}
		return out
	}
	mustScale := func(n string) {
		t.Helper()
		if out, err := kubectl("scale", "statefulset/certapi", "--replicas="+n); err != nil {
			t.Fatalf("kubectl scale statefulset/certapi --replicas=%s was refused: %v\n%s", n, err, out)
		}
	}
	mustBeRefused := func(what string, args ...string) {
		t.Helper()
		before := replicas()
		out, err := kubectl(args...)
		if err == nil || !strings.Contains(out, refused) || !strings.Contains(out, `"To one replica"`) {
			t.Errorf("%s from %s replicas: want refused with %q and the way to one replica, got err %v:\n%s", what, before, refused, err, out)
		}
		if after := replicas(); after != before {
			t.Errorf("%s: replicas %s, want %s as before", what, after, before)
		}
	}

	// kube-apiserver enforces a policy once it has compiled it: wait on a server-side dry run.
	testhelpers.WaitFor(t, 200*time.Millisecond, time.Minute, "the keep-etcd-quorum policy enforced", func(context.Context) (bool, string) {
		out, err := kubectl("scale", "statefulset/certapi", "--replicas=1", "--dry-run=server")
		return err != nil && strings.Contains(out, refused), out
	})
	if got := replicas(); got != "3" {
		t.Fatalf("the base's StatefulSet has %s replicas, want 3", got)
	}

	helm, err := framework.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err := e2etest.Run(t, helm, "template", "certapi", filepath.Join(root, "artifacts/charts/certapi"), "-n", "certapi-system",
		"--set", "replicas=1", "--show-only", "templates/deployment.yaml")
	if err != nil {
		t.Fatalf("helm template --set replicas=1: %v\n%s", err, errOut)
	}
	if !strings.Contains(string(out), "kind: StatefulSet") || !strings.Contains(string(out), "replicas: 1") {
		t.Fatalf("helm template --set replicas=1 rendered no StatefulSet of one replica:\n%s", out)
	}
	rendering := filepath.Join(t.TempDir(), "statefulset.yaml")
	if err := os.WriteFile(rendering, out, 0o600); err != nil {
		t.Fatal(err)
	}

	mustBeRefused("kubectl scale --replicas=1", "scale", "statefulset/certapi", "--replicas=1")
	mustBeRefused("kubectl patch of spec.replicas to 1", "patch", "statefulset/certapi", "--type=merge", "-p", `{"spec":{"replicas":1}}`)
	mustBeRefused("kubectl apply --server-side of helm template --set replicas=1", "apply", "--server-side", "--force-conflicts", "-f", rendering)
	mustScale("2")
	mustBeRefused("kubectl scale --replicas=1", "scale", "statefulset/certapi", "--replicas=1")
	mustScale("0")
	mustScale("1") // the restore into one member starts from 0
	mustScale("3")
}
