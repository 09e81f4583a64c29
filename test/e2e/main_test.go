// Package e2e runs certapi against a real kube-apiserver and etcd, started as processes on loopback by
// test/framework. Every test here goes through kube-apiserver's aggregation layer, as users do.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/framework"
)

// cp is the control plane shared by the tests of this package; tests that restart certapi make their own.
var cp *framework.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "certapi-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err = framework.Start(ctx, framework.Options{Dir: dir, Stdout: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		if cp != nil {
			framework.PrintLogTails(os.Stderr, cp.Logs())
			cp.Stop()
		}
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

// clients returns a certapi clientset and a Kubernetes clientset for config.
func clients(t *testing.T, config *rest.Config) (versioned.Interface, kubernetes.Interface) {
	t.Helper()
	c, err := versioned.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}

// testdata returns the path of a file under test/e2e/testdata.
func testdata(name string) string {
	return filepath.Join("testdata", name)
}
