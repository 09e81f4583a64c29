// Package node runs certapi the way users install it: the manifests of artifacts/ applied with kubectl to
// a control plane with a real node (test/framework's Options.Node: containerd, kubelet, kube-proxy,
// kube-controller-manager, kube-scheduler, CoreDNS), from the images of `make images`. The tests share one
// cluster; certapi is installed once (installCertapi) from artifacts/deploy/overlays/single-replica and the
// other tests use it.
package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
)

// probeImage is the framework's test image (test/framework/testdata/probe), built by TestMain.
const probeImage = "certapi-test/probe:dev"

var (
	// cp is the cluster the tests share.
	cp *framework.ControlPlane
	// images maps "certapi", "example-webhook" and "probe" to the names their archives were imported under.
	images = map[string]string{}
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "certapi-node-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), framework.StartTimeout+framework.NodeLockTimeout)
	defer cancel()
	probe := filepath.Join(dir, "probe.tar")
	if err := framework.BuildTestImage(ctx, "./test/framework/testdata/probe", probeImage, probe); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	archives := map[string]string{"probe": probe}
	for _, name := range []string{"certapi", "example-webhook"} {
		if archives[name], err = framework.ImageArchive(name + ".tar"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	opts := framework.Options{Dir: filepath.Join(dir, "cluster"), Stdout: os.Stderr, SkipCertapi: true, Node: true}
	for _, a := range archives {
		opts.NodeImages = append(opts.NodeImages, a)
	}
	cp, err = framework.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "starting the control plane: %v\n", err)
		if cp != nil {
			framework.PrintLogTails(os.Stderr, cp.Logs())
			cp.Stop()
		}
		return 1
	}
	for name, a := range archives {
		images[name] = cp.ClusterNode.Images[filepath.Base(a)][0]
	}
	start := time.Now()
	code := m.Run()
	fmt.Fprintf(os.Stderr, "node tests ran in %s\n", time.Since(start).Round(time.Second))
	cp.Stop()
	if left := cp.ClusterNode.Leftovers(); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: the node left on the machine: %v\n", left)
		code = 1
	}
	if code != 0 {
		framework.PrintLogTails(os.Stderr, cp.Logs())
		fmt.Fprintf(os.Stderr, "logs kept in %s\n", dir)
	} else {
		_ = os.RemoveAll(dir)
	}
	return code
}
