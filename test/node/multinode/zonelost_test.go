//go:build chaos

package multinode

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	kube, certapi := nodetest.Clients(t, cp)
	nodetest.LogPodsOnFailure(t, cp, ns, 5)
	installed(t)
	caBefore, line := caLine(t)

	leader := nodetest.LeaderPod(t, cp)
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var zoneA, zoneB string
	var leaderNode *framework.ClusterNode
	for _, p := range pods.Items {
		n := cp.Node(p.Spec.NodeName)
		switch {
		case n == nil || n == cp.ClusterNode:
			t.Fatalf("pod %s runs on %q, not on a worker", p.Name, p.Spec.NodeName)
		case p.Name == leader:
			leaderNode, zoneA = n, n.Zone
		case zoneB == "":
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

	w := startWorkload(t, "zone-lost")
	lost := []*framework.ClusterNode{leaderNode, added[0]}
	for _, n := range lost {
		if err := n.StopHard(ctx); err != nil {
			t.Fatal(err)
		}
	}
	stopped := time.Now()
	t.Logf("zone %s lost: nodes %s (of the leader %s) and %s stopped hard", zoneA, lost[0].Name, leader, lost[1].Name)
	var notReady time.Time
	nodetest.WaitFor(t, 3*time.Minute, "both Nodes of "+zoneA+" NotReady", func(ctx context.Context) (bool, string) {
		notReady = time.Time{}
		for _, n := range lost {
			c := nodeReady(ctx, t, n.Name)
			if c == nil || c.Status == corev1.ConditionTrue || c.LastTransitionTime.Time.Before(stopped.Add(-time.Second)) {
				return false, n.Name + " still Ready"
			}
			if c.LastTransitionTime.After(notReady) {
				notReady = c.LastTransitionTime.Time
			}
		}
		return true, ""
	})
	waitNewLeader(t, leader)
	steady := notReady.Add(endpointGone)
	<-time.After(time.Until(steady.Add(20 * time.Second))) // the window observed: nothing to wait for
	outage := since(w.Ops(), stopped)
	for _, o := range outage {
		if o.Start.After(steady) && o.Unavailable() {
			t.Errorf("an operation started %s after both Nodes went NotReady failed: %s", o.Start.Sub(notReady).Round(time.Second), o)
		}
	}
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
	history := w.Stop()
	t.Logf("the workload (seed %d): %s", seed, nodetest.Summarize(history))
	w.Check(t, cp, certapi, history, line, ns, selector, "")

	nodetest.Kubectl(t, cp, "-n", ns, "scale", "statefulset/certapi", "--replicas=3")
	nodetest.WaitFor(t, 5*time.Minute, "healed to three", healed(t, 3))
	caAfter, _ := caLine(t)
	if got, want := nodetest.CACertificates(caAfter), nodetest.CACertificates(caBefore); got != want {
		t.Errorf("the CA after the zone came back: %s; want the one of before, %s", got, want)
	}
}
