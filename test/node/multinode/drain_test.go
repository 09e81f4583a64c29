//go:build chaos

package multinode

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	kube, certapi := nodetest.Clients(t, cp)
	nodetest.LogPodsOnFailure(t, cp, ns, 3)
	installed(t)
	caBefore, line := caLine(t)

	leader := nodetest.LeaderPod(t, cp)
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var drained, slow, third *framework.ClusterNode
	for _, p := range pods.Items {
		n := cp.Node(p.Spec.NodeName)
		switch {
		case n == nil || n == cp.ClusterNode:
			t.Fatalf("pod %s runs on %q, not on a worker", p.Name, p.Spec.NodeName)
		case p.Name == leader:
			drained = n
		case slow == nil:
			slow = n
		default:
			third = n
		}
	}
	w := startWorkload(t, "drain-slow")
	if err := slow.Slow(ctx, slowCPUs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = slow.Slow(context.Background(), 0) })
	start := time.Now()
	t.Logf("node %s slow (its pods held to %.1f CPU); draining %s, the leader %s's", slow.Name, slowCPUs, drained.Name, leader)
	t.Cleanup(func() { _, _ = nodetest.KubectlErr(cp, "uncordon", drained.Name, third.Name) })
	nodetest.Kubectl(t, cp, "drain", drained.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m")
	t.Logf("figure: the drain of the leader's node, one member slow: %s", time.Since(start).Round(time.Second))
	waitNewLeader(t, leader)

	out, err := nodetest.KubectlErr(cp, "drain", third.Name, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=30s")
	if err == nil || !strings.Contains(err.Error(), "disruption budget") {
		t.Errorf("a second drain, of %s, while %s is away: %v\n%s; want it refused by the PodDisruptionBudget", third.Name, leader, err, out)
	}
	nodetest.Kubectl(t, cp, "uncordon", third.Name)
	<-time.After(20 * time.Second) // two members, one slow, under the workload: nothing to wait for
	during := since(w.Ops(), start)
	t.Logf("figure: the leader's node drained while another member is slow: from the drain to %s after it: %s; failed: %s",
		time.Since(start).Round(time.Second), nodetest.Summarize(during), nodetest.Answers(during))

	nodetest.Kubectl(t, cp, "uncordon", drained.Name)
	if err := slow.Slow(ctx, 0); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	nodetest.WaitFor(t, 5*time.Minute, "healed", healed(t, 3))
	t.Logf("figure: uncordoned and no longer slow: three pods Ready and three voters after %s", time.Since(back).Round(time.Second))
	history := w.Stop()
	t.Logf("the workload (seed %d): %s", seed, nodetest.Summarize(history))
	w.Check(t, cp, certapi, history, line, ns, selector, "")
	caAfter, _ := caLine(t)
	if got, want := nodetest.CACertificates(caAfter), nodetest.CACertificates(caBefore); got != want {
		t.Errorf("the CA after the drain: %s; want the one of before, %s", got, want)
	}
}
