package multinode

import (
	"context"
	"crypto/x509"
	"fmt"
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

// faultRun is one test's fault under the checker's workload: what was there before (the CA, its line, the
// leader, each replica's worker), the workload, and the end that holds the history to the invariants.
type faultRun struct {
	t        *testing.T
	caBefore *certapiv1alpha1.CertificateAuthority
	line     []*x509.Certificate
	// leader is the replica that led at the start, and nodeOf each replica's worker.
	leader string
	nodeOf map[string]*framework.ClusterNode
	w      *nodetest.Workload
}

// begin installs the HA default unless it is (installed), logs pods certapi pods' containers on failure,
// and reads the CA, its line, the leader and each replica's worker: one replica on each worker, none on
// the first node.
func begin(t *testing.T, pods int) *faultRun {
	t.Helper()
	ctx := context.Background()
	kube, _ := nodetest.Clients(t, cp)
	nodetest.LogPodsOnFailure(t, cp, ns, pods)
	installed(t)
	r := &faultRun{t: t, nodeOf: map[string]*framework.ClusterNode{}}
	r.caBefore, r.line = caLine(t)
	r.leader = nodetest.LeaderPod(t, cp)
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	used := map[*framework.ClusterNode]bool{}
	for _, p := range list.Items {
		n := cp.Node(p.Spec.NodeName)
		names[p.Name] = p.Spec.NodeName
		if n == nil || n == cp.ClusterNode || used[n] {
			t.Fatalf("certapi's pods on %v: want one on each worker", names)
		}
		r.nodeOf[p.Name], used[n] = n, true
	}
	if r.nodeOf[r.leader] == nil {
		t.Fatalf("the leader %s is not one of certapi's pods %v", r.leader, names)
	}
	t.Logf("certapi's pods on %v; %s leads", names, r.leader)
	return r
}

// notReadyAfter waits until every node of nodes is NotReady since stopped, and returns when the last of
// them became so, as kube-apiserver recorded it.
func notReadyAfter(t *testing.T, stopped time.Time, nodes ...*framework.ClusterNode) time.Time {
	t.Helper()
	var last time.Time
	nodetest.WaitFor(t, 3*time.Minute, fmt.Sprintf("%d Node(s) NotReady", len(nodes)), func(ctx context.Context) (bool, string) {
		last = time.Time{}
		for _, n := range nodes {
			c := nodeReady(ctx, t, n.Name)
			if c == nil {
				return false, n.Name + ": no Ready condition"
			}
			if c.Status == corev1.ConditionTrue || c.LastTransitionTime.Time.Before(stopped.Add(-time.Second)) {
				return false, n.Name + " Ready=" + string(c.Status)
			}
			if c.LastTransitionTime.Time.After(last) {
				last = c.LastTransitionTime.Time
			}
		}
		return true, ""
	})
	return last
}

// servedOnceGone observes the workload until 20 s after the lost nodes' pods stopped being endpoints
// (notReady, the last of them NotReady, plus endpointGone): kube-apiserver routes calls to a lost pod until
// the node lifecycle controller has marked it not Ready and the EndpointSlice followed, and from then on
// no operation may fail for want of service. It returns the operations started since stopped.
func (r *faultRun) servedOnceGone(stopped, notReady time.Time) []nodetest.Op {
	r.t.Helper()
	steady := notReady.Add(endpointGone)
	<-time.After(time.Until(steady.Add(20 * time.Second))) // the window observed: nothing to wait for
	outage := since(r.w.Ops(), stopped)
	for _, o := range outage {
		if o.Start.After(steady) && o.Unavailable() {
			r.t.Errorf("an operation started %s after the Node(s) went NotReady failed: %s", o.Start.Sub(notReady).Round(time.Second), o)
		}
	}
	if failed := nodetest.Failed(outage); len(failed) > 0 {
		r.t.Logf("the first failure %s after the fault: %s; the last %s after: %s", failed[0].Start.Sub(stopped).Round(time.Second), failed[0],
			failed[len(failed)-1].Start.Sub(stopped).Round(time.Second), failed[len(failed)-1])
	}
	return outage
}

// end stops the workload and holds its history to the invariants (Workload.Check: nothing acknowledged
// lost, every certificate of the CA line, fencing), and the CA to the one of before: never a second one.
func (r *faultRun) end() {
	r.t.Helper()
	history := r.w.Stop()
	r.t.Logf("the workload (seed %d): %s", seed, nodetest.Summarize(history))
	r.w.Check(r.t, cp, history, r.line, ns, selector, "")
	caAfter, _ := caLine(r.t)
	if got, want := nodetest.CACertificates(caAfter), nodetest.CACertificates(r.caBefore); got != want {
		r.t.Errorf("the CA at the end: %s; want the one of before, %s", got, want)
	}
}

// startWorkload starts the checker's workload (four callers, the package's seed) in a new namespace ns and
// returns once it is under way.
func startWorkload(t *testing.T, ns string) *nodetest.Workload {
	t.Helper()
	nodetest.Kubectl(t, cp, "create", "namespace", ns)
	w := nodetest.StartWorkload(t, cp.AdminConfig, ns, 4, seed)
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
