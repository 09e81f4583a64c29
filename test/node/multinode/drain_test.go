//go:build chaos

package multinode

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

// slowCPUs is what a slow member's node gets of the machine's CPU in TestDrainSlowMember: a fifth of one.
const slowCPUs = 0.2

// TestDrainSlowMember: `kubectl drain` of the leader's worker under certapi's PodDisruptionBudget
// (maxUnavailable 1) while another member's node is slow (its pods held to slowCPUs), under the checker's
// workload. The drain evicts the leader's pod; its replacement can run only on the cordoned node (its
// local volume), so the cluster serves on two members, one of them slow, and another replica leads. A
// second drain, of the third member's node, is then refused by the budget (it would take the quorum), and
// the node is uncordoned. Uncordoned and no longer slow, the cluster heals to three voters without a
// person. Nothing acknowledged is lost, fencing holds, and the CA is the one of before.
func TestDrainSlowMember(t *testing.T) {
	ctx := context.Background()
	r := begin(t, 3)
	drained := r.nodeOf[r.leader]
	var slow, third *framework.ClusterNode
	for pod, n := range r.nodeOf {
		switch {
		case pod == r.leader:
		case slow == nil:
			slow = n
		default:
			third = n
		}
	}
	r.w = startWorkload(t, "drain-slow")
	if err := slow.Slow(ctx, slowCPUs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Slow(context.Background(), 0) })
	start := time.Now()
	t.Logf("node %s slow (its pods held to %.1f CPU); draining %s, the leader %s's", slow.Name, slowCPUs, drained.Name, r.leader)
	t.Cleanup(func() { _, _ = nodetest.KubectlErr(cp, "uncordon", drained.Name, third.Name) })
	nodetest.Kubectl(t, cp, "drain", drained.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m")
	t.Logf("figure: the drain of the leader's node, one member slow: %s", time.Since(start).Round(time.Second))
	waitNewLeader(t, r.leader)

	out, err := nodetest.KubectlErr(cp, "drain", third.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s")
	if err == nil || !strings.Contains(err.Error(), "disruption budget") {
		t.Errorf("a second drain, of %s, while %s is away: %v\n%s; want it refused by the PodDisruptionBudget", third.Name, r.leader, err, out)
	}
	nodetest.Kubectl(t, cp, "uncordon", third.Name)
	<-time.After(20 * time.Second) // two members, one slow, under the workload: nothing to wait for
	during := since(r.w.Ops(), start)
	t.Logf("figure: the leader's node drained while another member is slow: from the drain to %s after it: %s; failed: %s",
		time.Since(start).Round(time.Second), nodetest.Summarize(during), nodetest.Answers(during))

	nodetest.Kubectl(t, cp, "uncordon", drained.Name)
	if err := slow.Slow(ctx, 0); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	nodetest.WaitFor(t, 5*time.Minute, "healed", healed(t, 3))
	t.Logf("figure: uncordoned and no longer slow: three pods Ready and three voters after %s", time.Since(back).Round(time.Second))
	r.end()
}
