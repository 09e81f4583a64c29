// Package node runs certapi the way users install it: the manifests of artifacts/ applied with kubectl to
// a control plane with a real node (test/framework's Options.Node: containerd, kubelet, kube-proxy,
// kube-controller-manager, kube-scheduler, CoreDNS), from the images of `make images`. The tests share one
// cluster; certapi is installed once (installCertapi) from artifacts/deploy/overlays/single-replica and the
// other tests use it.
package node

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
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
	os.Exit(nodetest.Run(m, "certapi-node-", func(ctx context.Context, dir string) (map[string]string, error) {
		probe := filepath.Join(dir, "probe.tar")
		if err := framework.BuildTestImage(ctx, "./test/framework/testdata/probe", probeImage, probe); err != nil {
			return nil, err
		}
		archives := map[string]string{"probe": probe}
		for _, name := range []string{"certapi", "example-webhook"} {
			a, err := framework.ImageArchive(name + ".tar")
			if err != nil {
				return nil, err
			}
			archives[name] = a
		}
		return archives, nil
	}, func(c *framework.ControlPlane, imgs map[string]string) { cp, images = c, imgs }))
}
