package multinode

import (
	"context"
	"crypto/x509"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

const (
	ns       = framework.CertapiNamespace
	selector = "app.kubernetes.io/name=certapi,app.kubernetes.io/component=apiserver"
	// seed is the workload's: its choices are the same in every run for the same answers.
	seed = 37
)

// endpointGone bounds how long after kube-apiserver marks a lost node NotReady its pod stays an endpoint
// kube-apiserver routes calls to: the node lifecycle controller marks the pod not Ready at once, and the
// EndpointSlice controller and kube-apiserver's informer follow within seconds (on a loaded machine, more:
// make test runs four jobs on two cores).
const endpointGone = 30 * time.Second

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
	kube, certapi := nodetest.Clients(t, cp)
	nodetest.LogPodsOnFailure(t, cp, ns, 3)
	installed(t)
	caBefore, line := caLine(t)
	nodeOf := map[string]string{}
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []string
	for _, p := range pods.Items {
		nodeOf[p.Name] = p.Spec.NodeName
		if p.Spec.NodeName == framework.NodeName || slices.Contains(nodes, p.Spec.NodeName) {
			t.Fatalf("certapi's pods on %v: want one on each worker", nodeOf)
		}
		nodes = append(nodes, p.Spec.NodeName)
	}
	t.Logf("certapi's pods on %v", nodeOf)

	w := startWorkload(t, "node-lost")

	leader := nodetest.LeaderPod(t, cp)
	lost := cp.Node(nodeOf[leader])
	if lost == nil {
		t.Fatalf("the leader %s is not one of certapi's pods %v", leader, nodeOf)
	}
	if err := lost.StopHard(ctx); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Logf("stopped node %s (of the leader %s) hard", lost.Name, leader)
	var notReady time.Time
	nodetest.WaitFor(t, 3*time.Minute, "Node "+lost.Name+" NotReady", func(ctx context.Context) (bool, string) {
		c := nodeReady(ctx, t, lost.Name)
		if c == nil {
			return false, "no Ready condition"
		}
		notReady = c.LastTransitionTime.Time
		return c.Status != corev1.ConditionTrue && notReady.After(stopped.Add(-time.Second)), "Ready=" + string(c.Status)
	})
	waitNewLeader(t, leader)
	// kube-apiserver routes calls to the lost pod until the node lifecycle controller has marked it not
	// Ready (when the Node goes NotReady) and the EndpointSlice followed: from then on nothing may fail.
	steady := notReady.Add(endpointGone)
	<-time.After(time.Until(steady.Add(20 * time.Second))) // the window observed: nothing to wait for
	outage := since(w.Ops(), stopped)
	for _, o := range outage {
		if o.Start.After(steady) && o.Unavailable() {
			t.Errorf("an operation started %s after the Node went NotReady failed: %s", o.Start.Sub(notReady).Round(time.Second), o)
		}
	}
	failed := nodetest.Failed(outage)
	if len(failed) > 0 {
		t.Logf("the first failure %s; the last %s", failed[0], failed[len(failed)-1])
	}
	t.Logf("figure: the leader's node stopped hard: the Node NotReady after %s; from the stop to %s after it: %s; failed: %s",
		notReady.Sub(stopped).Round(time.Second), time.Since(stopped).Round(time.Second), nodetest.Summarize(outage), nodetest.Answers(outage))

	if err := lost.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	nodetest.WaitFor(t, 5*time.Minute, "healed", healed(t, 3))
	t.Logf("figure: the node back with its disk: three pods Ready and three voters after %s", time.Since(resumed).Round(time.Second))
	history := w.Stop()
	t.Logf("the workload (seed %d): %s", seed, nodetest.Summarize(history))
	w.Check(t, cp, certapi, history, line, ns, selector, "")
	caAfter, _ := caLine(t)
	if got, want := nodetest.CACertificates(caAfter), nodetest.CACertificates(caBefore); got != want {
		t.Errorf("the CA after the node came back: %s; want the one of before, %s", got, want)
	}
}

// startWorkload starts the checker's workload (four callers, the package's seed) in a new namespace ns and
// returns once it is under way.
func startWorkload(t *testing.T, ns string) *nodetest.Workload {
	t.Helper()
	_, certapi := nodetest.Clients(t, cp)
	nodetest.Kubectl(t, cp, "create", "namespace", ns)
	w := nodetest.StartWorkload(t, certapi, ns, 4, seed)
	nodetest.WaitFor(t, time.Minute, "the workload under way", func(context.Context) (bool, string) {
		return len(w.Ops()) >= 40, fmt.Sprintf("%d operations", len(w.Ops()))
	})
	return w
}

// waitNewLeader waits until a replica other than old leads.
func waitNewLeader(t *testing.T, old string) {
	t.Helper()
	nodetest.WaitFor(t, 2*time.Minute, "a leader other than "+old, func(context.Context) (bool, string) {
		l, err := nodetest.LeaderOf(cp)
		if err != nil {
			return false, err.Error()
		}
		return l != "" && l != old, "leader " + l
	})
}

// nodeReady returns the Node's Ready condition (nil when there is none or the Node cannot be read).
func nodeReady(ctx context.Context, t *testing.T, name string) *corev1.NodeCondition {
	kube, _ := nodetest.Clients(t, cp)
	n, err := kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return &c
		}
	}
	return nil
}

// voters reports whether certapi's etcd cluster is n healthy voters, as CertificateAuthority/default
// reports it.
func voters(ctx context.Context, certapi versioned.Interface, want int) (bool, string) {
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	if ca.Status.Etcd == nil {
		return false, "no etcd status"
	}
	n := 0
	for _, m := range ca.Status.Etcd.Members {
		if m.Role == certapiv1alpha1.EtcdMemberVoter && m.Healthy {
			n++
		}
	}
	return n == want && len(ca.Status.Etcd.Members) == want, fmt.Sprintf("members %+v", ca.Status.Etcd.Members)
}

// since returns the operations of ops that started at or after t.
func since(ops []nodetest.Op, t time.Time) []nodetest.Op {
	var out []nodetest.Op
	for _, o := range ops {
		if !o.Start.Before(t) {
			out = append(out, o)
		}
	}
	return out
}

// installed installs the HA default (framework.InstallCertapiHA: each replica on the worker of its claim's
// local volume) unless the package's tests already have, and waits until it is three Ready pods and three
// voters. certapi runs with --v=3, which logs every signature, for the checker's fencing check.
func installed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	kube, _ := nodetest.Clients(t, cp)
	if _, err := kube.AppsV1().StatefulSets(ns).Get(ctx, "certapi", metav1.GetOptions{}); err != nil {
		if err := cp.InstallCertapiHA(ctx, fmt.Sprintf("--v=%d", issuer.SignedLogLevel)); err != nil {
			t.Fatal(err)
		}
	}
	nodetest.WaitFor(t, 5*time.Minute, "healed", healed(t, 3))
}

// healed returns a condition that holds when the cluster is whole: every Node Ready, replicas certapi pods
// Ready and as many healthy voters.
func healed(t *testing.T, replicas int) func(context.Context) (bool, string) {
	kube, certapi := nodetest.Clients(t, cp)
	return func(ctx context.Context) (bool, string) {
		nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
					return false, fmt.Sprintf("Node %s Ready=%s", n.Name, c.Status)
				}
			}
		}
		if ok, status := nodetest.PodsReady(ctx, kube, ns, selector, replicas); !ok {
			return false, status
		}
		return voters(ctx, certapi, replicas)
	}
}

// caLine returns CertificateAuthority/default and the CA certificates of its bundle.
func caLine(t *testing.T) (*certapiv1alpha1.CertificateAuthority, []*x509.Certificate) {
	t.Helper()
	_, certapi := nodetest.Clients(t, cp)
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	line, err := nodetest.CALine(ca)
	if err != nil {
		t.Fatal(err)
	}
	return ca, line
}
