package multinode

import (
	"context"
	"testing"
	"time"

	"github.com/certapi/certapi/test/node/nodetest"
)

// TestNodeLost: the HA default across three workers, one replica on each, under the checker's workload
// (nodetest.StartWorkload: creates, updates, deletes and certificates through kube-apiserver). The
// leader's node stops hard (its link down, every process of it frozen, as a machine that loses power). A
// replica on another node must lead, and no operation started once kube-apiserver has marked the node
// NotReady (and its pod's endpoint is gone, endpointGone) may fail for want of service (a refusal such as
// AlreadyExists after a create that was applied but not acknowledged is an answer). Then the node comes back with its
// disk: its member rejoins and the cluster is three voters again, without a person. The checker holds the
// history against the end: every acknowledged write there, every certificate signed by the one line of
// CAs, the CA the one of before (never a second one), and at most one replica signing at any moment
// (nodetest.CheckFencing, on the signatures the replicas logged).
func TestNodeLost(t *testing.T) {
	ctx := context.Background()
	r := begin(t, 3)
	r.w = startWorkload(t, "node-lost")
	lost := r.nodeOf[r.leader]
	if err := lost.StopHard(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Logf("stopped node %s (of the leader %s) hard", lost.Name, r.leader)
	notReady := notReadyAfter(t, stopped, lost)
	waitNewLeader(t, r.leader)
	outage := r.servedOnceGone(stopped, notReady)
	t.Logf("figure: the leader's node stopped hard: the Node NotReady after %s; from the stop to %s after it: %s; failed: %s",
		notReady.Sub(stopped).Round(time.Second), time.Since(stopped).Round(time.Second), nodetest.Summarize(outage), nodetest.Answers(outage))

	if err := lost.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	nodetest.WaitFor(t, 5*time.Minute, "healed", healed(t, 3))
	t.Logf("figure: the node back with its disk: three pods Ready and three voters after %s", time.Since(resumed).Round(time.Second))
	r.end()
}
