//go:build chaos

package multinode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

// TestZoneLost: the HA default scaled to five replicas over three zones, two of them of two nodes (two
// workers added, one in the leader's zone and one in another replica's, each with a local volume), under
// the checker's workload. The leader's zone is lost at once, both its nodes stopped hard: the three members
// left keep the quorum (three of five), one of their replicas leads, and no operation started once
// kube-apiserver has marked both Nodes NotReady (and their pods' endpoints are gone, endpointGone) fails for
// want of service. The zone comes back with its disks and the cluster is five voters again without a
// person; scaled back to three, the two members go. Nothing acknowledged is lost, fencing holds, and the
// CA is the one of before.
func TestZoneLost(t *testing.T) {
	ctx := context.Background()
	r := begin(t, 5)
	zoneA, zoneB := r.nodeOf[r.leader].Zone, ""
	for pod, n := range r.nodeOf {
		if pod != r.leader {
			zoneB = n.Zone
		}
	}
	added, err := cp.AddWorkers(ctx, 2, zoneA, zoneB)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range added {
		if err := cp.CreateLocalPV(ctx, fmt.Sprintf("certapi-data-zone-%d", i), "1Gi", n); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	nodetest.Kubectl(t, cp, "-n", ns, "scale", "statefulset/certapi", "--replicas=5")
	nodetest.WaitFor(t, 5*time.Minute, "five pods Ready and five voters", healed(t, 5))
	t.Logf("figure: scaled to five over zones %s (2 nodes), %s (2 nodes) and one more: %s", zoneA, zoneB, time.Since(start).Round(time.Second))

	r.w = startWorkload(t, "zone-lost")
	lost := []*framework.ClusterNode{r.nodeOf[r.leader], added[0]}
	for _, n := range lost {
		if err := n.StopHard(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stopped := time.Now()
	t.Logf("zone %s lost: nodes %s (of the leader %s) and %s stopped hard", zoneA, lost[0].Name, r.leader, lost[1].Name)
	notReady := notReadyAfter(t, stopped, lost...)
	waitNewLeader(t, r.leader)
	outage := r.servedOnceGone(stopped, notReady)
	t.Logf("figure: a zone of two nodes of five lost (the leader's): both Nodes NotReady after %s; from the stop to %s after it: %s; failed: %s",
		notReady.Sub(stopped).Round(time.Second), time.Since(stopped).Round(time.Second), nodetest.Summarize(outage), nodetest.Answers(outage))

	for _, n := range lost {
		if err := n.Resume(ctx); err != nil {
			t.Fatal(err)
		}
	}
	resumed := time.Now()
	nodetest.WaitFor(t, 5*time.Minute, "healed to five", healed(t, 5))
	t.Logf("figure: the zone back with its disks: five pods Ready and five voters after %s", time.Since(resumed).Round(time.Second))
	r.end()

	nodetest.Kubectl(t, cp, "-n", ns, "scale", "statefulset/certapi", "--replicas=3")
	nodetest.WaitFor(t, 5*time.Minute, "healed to three", healed(t, 3))
}
