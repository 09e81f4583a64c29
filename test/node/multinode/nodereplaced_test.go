//go:build chaos

package multinode

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/test/node/nodetest"
)

// TestNodeReplaced: the leader's worker lost for good with its local volume (ControlPlane.Remove: its
// processes killed, its disk gone, its Node deleted), under the checker's workload. The two other replicas
// keep the quorum, and one of them leads. Then what a local volume asks of a person, and nothing more: a
// new machine joins with a disk (AddWorkers, a local volume on it), and the lost replica's claim, bound
// to a volume that no longer exists, is deleted with its volume's object. The StatefulSet makes a new
// claim, which binds to the new disk, and the replica runs on the new node with no data: its member
// removes its own stale entry, joins as a learner and is promoted, and the cluster is three voters again.
// Nothing acknowledged is lost, and the CA is the one of before.
func TestNodeReplaced(t *testing.T) {
	ctx := context.Background()
	kube, _ := nodetest.Clients(t, cp)
	r := begin(t, 3)
	r.w = startWorkload(t, "node-replaced")
	claim := "data-" + r.leader
	pvc, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lost := r.nodeOf[r.leader]
	if err := cp.Remove(ctx, lost); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	t.Logf("node %s (of the leader %s, its volume %s) removed for good", lost.Name, r.leader, pvc.Spec.VolumeName)
	waitNewLeader(t, r.leader)
	t.Logf("figure: a new leader %s after the node was removed", time.Since(removed).Round(time.Second))

	added, err := cp.AddWorkers(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.CreateLocalPV(ctx, "certapi-data-replacement", "1Gi", added[0]); err != nil {
		t.Fatal(err)
	}
	replaced := time.Now()
	// The claim goes once kube-controller-manager has deleted the pod of the deleted Node (pod garbage
	// collection): kubectl does not wait for it.
	nodetest.Kubectl(t, cp, "-n", ns, "delete", "pvc", claim, "--wait=false")
	nodetest.Kubectl(t, cp, "delete", "pv", pvc.Spec.VolumeName, "--wait=false")
	nodetest.WaitFor(t, 5*time.Minute, r.leader+" Ready on "+added[0].Name, func(ctx context.Context) (bool, string) {
		p, err := kube.CoreV1().Pods(ns).Get(ctx, r.leader, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := false
		for _, c := range p.Status.Conditions {
			ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
		}
		return p.Spec.NodeName == added[0].Name && ready, fmt.Sprintf("on %q, phase %s, ready %v", p.Spec.NodeName, p.Status.Phase, ready)
	})
	nodetest.WaitFor(t, 5*time.Minute, "healed", healed(t, 3))
	nodetest.Logged(t, cp, ns, r.leader, "Removed a stale etcd member entry of this member", "Promoted this etcd learner to a voting member")
	t.Logf("figure: from the new node Ready and the claim deleted to three pods Ready and three voters: %s; from the node lost: %s",
		time.Since(replaced).Round(time.Second), time.Since(removed).Round(time.Second))
	outage := since(r.w.Ops(), removed)
	if failed := nodetest.Failed(outage); len(failed) > 0 {
		t.Logf("the first failure %s after the loss: %s; the last %s after: %s", failed[0].Start.Sub(removed).Round(time.Second), failed[0],
			failed[len(failed)-1].Start.Sub(removed).Round(time.Second), failed[len(failed)-1])
	}
	t.Logf("figure: the leader's node lost for good and replaced: from its loss to healed: %s; failed: %s", nodetest.Summarize(outage), nodetest.Answers(outage))
	r.end()
}
