// Package manifests checks the manifests under artifacts/ against a real kube-apiserver and certapi:
// TestManifests builds every kustomization and checks what the design says of it on the shared control
// plane, and TestManifestsRBACRunsCertapi runs certapi on a control plane of its own with exactly the
// RBAC and admission policies of the base.
package manifests

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
)

// cp is the control plane TestManifests checks the manifests against.
var cp *framework.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "certapi-manifests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp = framework.StartMain(ctx, framework.Options{Dir: dir, Stdout: os.Stderr})
	if cp == nil {
		return 1
	}
	code := m.Run()
	if code != 0 {
		framework.PrintLogTails(os.Stderr, cp.Logs())
		fmt.Fprintf(os.Stderr, "logs and data kept in %s\n", dir)
	}
	cp.Stop()
	if code == 0 {
		_ = os.RemoveAll(dir)
	}
	return code
}

// kubectlResult runs kubectl against the shared control plane.
func kubectlResult(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return e2etest.Kubectl(t, cp.Kubeconfig, args...)
}
