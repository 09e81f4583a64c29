package nodetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
)

// Run is a test package's TestMain around one cluster with a node: it makes a temporary directory
// named after prefix, asks archives for the image archives to import (key -> path; it may build some in
// the directory it is given), starts the control plane with its node (no certapi: the tests install it),
// hands it and the names the archives were imported under (by key) to started, runs the tests, stops the
// cluster and fails when the node left anything on the machine. Logs are kept, and their tails printed,
// when anything failed. It returns the exit code for os.Exit.
func Run(m *testing.M, prefix string, archives func(ctx context.Context, dir string) (map[string]string, error),
	started func(cp *framework.ControlPlane, images map[string]string)) int {
	return RunWorkers(m, prefix, 0, archives, started)
}

// RunWorkers is Run with that many worker nodes besides the first (framework.Options.WorkerNodes), the
// archives imported into every node.
func RunWorkers(m *testing.M, prefix string, workers int, archives func(ctx context.Context, dir string) (map[string]string, error),
	started func(cp *framework.ControlPlane, images map[string]string)) int {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), framework.StartTimeout+framework.NodeLockTimeout)
	defer cancel()
	paths, err := archives(ctx, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := framework.Options{Dir: filepath.Join(dir, "cluster"), Stdout: os.Stderr, SkipCertapi: true, Node: true, WorkerNodes: workers}
	for _, a := range paths {
		opts.NodeImages = append(opts.NodeImages, a)
	}
	cp := framework.StartMain(ctx, opts)
	if cp == nil {
		return 1
	}
	images := map[string]string{}
	for key, a := range paths {
		images[key] = cp.ClusterNode.Images[filepath.Base(a)][0]
	}
	started(cp, images)
	start := time.Now()
	code := m.Run()
	fmt.Fprintf(os.Stderr, "node tests ran in %s\n", time.Since(start).Round(time.Second))
	cp.Stop()
	for _, n := range cp.Nodes() {
		if left := n.Leftovers(); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: node %s left on the machine: %v\n", n.Name, left)
			code = 1
		}
	}
	if code != 0 {
		framework.PrintLogTails(os.Stderr, cp.Logs())
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	return code
}
