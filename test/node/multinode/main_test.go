// Package multinode runs certapi's HA default across nodes (test/framework's Options.WorkerNodes): three
// workers, each in a network namespace of its own with its own containerd, kubelet and kube-proxy, each
// replica on a worker of its own with its volume local to that worker, and the first node the control
// plane's. The tests make the faults a cluster's nodes meet (a node lost, ...) under issuance load, and
// check that nothing acknowledged is lost and that no second CA is ever made.
package multinode

import (
	"context"
	"os"
	"testing"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

// workers is the number of worker nodes: one per replica of the HA default.
const workers = 3

var cp *framework.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(nodetest.RunWorkers(m, "certapi-node-multi-", workers, func(context.Context, string) (map[string]string, error) {
		certapi, err := framework.ImageArchive("certapi.tar")
		return map[string]string{"certapi": certapi}, err
	}, func(c *framework.ControlPlane, _ map[string]string) { cp = c }))
}
