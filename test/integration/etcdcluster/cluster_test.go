// Package etcdcluster tests pkg/etcdcluster against real embedded etcd members started in this process:
// bootstrap, learners that join and are promoted, restarts with and without data, and dead-member
// removal that keeps quorum.
package etcdcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/component-base/metrics/testutil"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

const (
	deadMemberTimeout = 3 * time.Second
	checkInterval     = 200 * time.Millisecond
)

// node is one would-be pod: a name, fixed ports and a private directory that outlive its member.
type node struct {
	name               string
	dir                string
	peerURL, clientURL string
	designated         bool
	member             *etcdcluster.Member
	cancel             context.CancelFunc
	done               chan struct{}
}

// world is the test's StatefulSet: every node's address, running or not.
type world struct {
	t     *testing.T
	ca    *etcdcluster.PeerCA
	nodes []*node
	mu    sync.Mutex
	// deadMemberTimeout and stalledLearnerTimeout are given to every member.
	deadMemberTimeout, stalledLearnerTimeout time.Duration
	// replicas is the StatefulSet's spec.replicas; 0 when unknown.
	replicas int
	// store, when set, is the peer CA's store: members rotate the CA through it, and ca follows it.
	store *memStore
	// epoch is the --etcd-cluster-epoch every member starts with.
	epoch int
	// external are the client URLs of members that run outside this process (certapi's own): discovery
	// always lists them.
	external []string
	// configure, when set, changes each member's configuration last (custody_test.go).
	configure func(nd *node, cfg *etcdcluster.Config)
}

func newWorld(t *testing.T, n int) *world {
	t.Helper()
	ca, err := etcdcluster.NewPeerCA(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ca: ca, deadMemberTimeout: deadMemberTimeout}
	for i := range n {
		w.nodes = append(w.nodes, &node{
			name:       fmt.Sprintf("certapi-%d", i),
			dir:        t.TempDir(),
			peerURL:    "https://127.0.0.1:" + freePort(t),
			clientURL:  "https://127.0.0.1:" + freePort(t),
			designated: i == 0,
		})
	}
	t.Cleanup(func() {
		for _, nd := range w.nodes {
			w.stop(nd)
		}
	})
	return w
}

func freePort(t *testing.T) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	// Below the kernel's ephemeral range (framework.FreePorts): a member restarted on its port must not
	// find it taken by the source port of another process's connection meanwhile.
	ps, err := framework.FreePorts(1, ports...)
	if err != nil {
		t.Fatal(err)
	}
	ports = append(ports, ps[0])
	return strconv.Itoa(ps[0])
}

// ports are the ports freePort handed out in this process, never handed out twice.
var (
	portsMu sync.Mutex
	ports   []int
)

// discover answers as DNS on a headless Service with publishNotReadyAddresses would: every running
// node's address.
func (w *world) discover(self *node) func(context.Context) (etcdcluster.Discovery, error) {
	return func(context.Context) (etcdcluster.Discovery, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		var d etcdcluster.Discovery
		d.ClientURLs = append(d.ClientURLs, w.external...)
		d.OtherPeersExist = len(w.external) > 0
		for _, nd := range w.nodes {
			if nd == self || nd.member == nil {
				continue
			}
			d.ClientURLs = append(d.ClientURLs, nd.clientURL)
			d.OtherPeersExist = true
		}
		return d, nil
	}
}

func (w *world) config(nd *node) etcdcluster.Config {
	w.mu.Lock()
	ca, store, epoch := w.ca, w.store, w.epoch
	w.mu.Unlock()
	var peerCAStore etcdcluster.PeerCAStore
	if store != nil {
		peerCAStore = store
	}
	cfg := etcdcluster.Config{
		Name: nd.name, Dir: nd.dir,
		PeerURL: nd.peerURL, ClientURL: nd.clientURL, ListenPeerURL: nd.peerURL, ListenClientURL: nd.clientURL,
		Designated: nd.designated, ClusterEpoch: epoch, CA: ca, PeerCAStore: peerCAStore, Discover: w.discover(nd),
		DeadMemberTimeout: w.deadMemberTimeout, StalledLearnerTimeout: w.stalledLearnerTimeout,
		CheckInterval: checkInterval, RetryInterval: 500 * time.Millisecond,
		DesiredMembers: func(context.Context) (int, bool) {
			w.mu.Lock()
			defer w.mu.Unlock()
			return w.replicas, w.replicas > 0
		},
	}
	if w.configure != nil {
		w.configure(nd, &cfg)
	}
	return cfg
}

// start starts nd's member and its maintenance loop, and returns once it is a voting member.
func (w *world) start(nd *node) {
	w.t.Helper()
	if err := w.startErr(nd); err != nil {
		w.t.Fatal(err)
	}
}

// startAll starts nodes at once, as a StatefulSet with parallel pod management would.
func (w *world) startAll(nodes ...*node) {
	w.t.Helper()
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = w.startErr(nd) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			w.t.Fatal(err)
		}
	}
}

func (w *world) startErr(nd *node) error {
	if err := w.startFor(nd, time.Minute); err != nil {
		return fmt.Errorf("starting %s: %w", nd.name, err)
	}
	return nil
}

// stop stops nd's member as a killed pod's would stop; its directory stays.
func (w *world) stop(nd *node) {
	w.mu.Lock()
	m, cancel, done := nd.member, nd.cancel, nd.done
	nd.member = nil
	w.mu.Unlock()
	if m == nil {
		return
	}
	cancel()
	<-done
	m.Stop()
}

// client is an etcd client of the running members.
func (w *world) client() *clientv3.Client {
	w.t.Helper()
	var urls []string
	var any *etcdcluster.Member
	for _, nd := range w.nodes {
		if nd.member != nil {
			urls = append(urls, nd.clientURL)
			any = nd.member
		}
	}
	certFile, keyFile, caFile := any.ClientTLSFiles()
	tlsCfg, err := tlsClientConfig(certFile, keyFile, caFile)
	if err != nil {
		w.t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: urls, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = c.Close() })
	return c
}

// membership describes the member list as nd has applied it.
func membership(nd *node) (voters, learners []string) {
	for _, e := range nd.member.Members() {
		name := e.Name
		if name == "" {
			name = fmt.Sprintf("(unstarted %x)", e.ID)
		}
		if e.IsLearner {
			learners = append(learners, name)
		} else {
			voters = append(voters, name)
		}
	}
	return voters, learners
}

// waitVoters waits until every running node sees exactly n voting members and no learner.
func (w *world) waitVoters(n int) {
	w.t.Helper()
	testhelpers.WaitFor(w.t, 50*time.Millisecond, 30*time.Second, fmt.Sprintf("%d voting members and no learner on every running member", n), func(context.Context) (bool, string) {
		seen := ""
		for _, nd := range w.nodes {
			if nd.member == nil {
				continue
			}
			v, l := membership(nd)
			seen += fmt.Sprintf("%s: voters %v learners %v; ", nd.name, v, l)
			if len(v) != n || len(l) != 0 {
				return false, seen
			}
		}
		return true, seen
	})
}

func put(t *testing.T, c *clientv3.Client, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, k, v); err != nil {
		t.Fatalf("put %s: %v", k, err)
	}
}

// getFrom reads k linearizably through nd's own client URL only.
func (w *world) getFrom(nd *node, k string) string {
	w.t.Helper()
	certFile, keyFile, caFile := nd.member.ClientTLSFiles()
	tlsCfg, err := tlsClientConfig(certFile, keyFile, caFile)
	if err != nil {
		w.t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{nd.clientURL}, TLS: tlsCfg, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		w.t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, k)
	if err != nil {
		w.t.Fatalf("get %s from %s: %v", k, nd.name, err)
	}
	if len(resp.Kvs) == 0 {
		return ""
	}
	return string(resp.Kvs[0].Value)
}

func TestFormationAndMembership(t *testing.T) {
	metrics.Register()
	w := newWorld(t, 3)
	n0, n1, n2 := w.nodes[0], w.nodes[1], w.nodes[2]

	t.Log("the first member bootstraps")
	t0 := time.Now()
	w.start(n0)
	w.waitVoters(1)
	t.Logf("figure: bootstrap of the first member: %s", time.Since(t0).Round(time.Millisecond))
	c := w.client()
	put(t, c, "/ca", "the-one-ca")

	t.Log("two more join at once as learners, one at a time (etcd allows one learner), and are promoted")
	t0 = time.Now()
	w.startAll(n1, n2)
	w.waitVoters(3)
	t.Logf("figure: two members joined as learners and were promoted: %s", time.Since(t0).Round(time.Millisecond))
	testhelpers.WaitFor(t, 50*time.Millisecond, 10*time.Second, "the metrics to show 3 voters, no learner and 3 healthy members", func(context.Context) (bool, string) {
		voters, _ := testutil.GetGaugeMetricValue(metrics.EtcdMembers.WithLabelValues("voter"))
		learners, _ := testutil.GetGaugeMetricValue(metrics.EtcdMembers.WithLabelValues("learner"))
		healthy := 0.0
		for _, nd := range w.nodes {
			v, _ := testutil.GetGaugeMetricValue(metrics.EtcdMemberHealthy.WithLabelValues(nd.name))
			healthy += v
		}
		return voters == 3 && learners == 0 && healthy == 3, fmt.Sprintf("voters %v learners %v healthy %v", voters, learners, healthy)
	})
	for _, nd := range w.nodes {
		if got := w.getFrom(nd, "/ca"); got != "the-one-ca" {
			t.Fatalf("%s reads %q, want the-one-ca", nd.name, got)
		}
	}

	t.Log("a restart with an existing data directory keeps the member")
	id1 := n1.member.ID()
	w.stop(n1)
	w.start(n1)
	if n1.member.ID() != id1 {
		t.Fatalf("restarted member has ID %x, want %x: it should have restarted on its data", n1.member.ID(), id1)
	}
	w.waitVoters(3)

	t.Log("the designated first member loses its volume while the others run: it joins, never bootstraps, and its stale entry goes")
	id0 := n0.member.ID()
	w.stop(n0)
	if err := os.RemoveAll(n0.dir); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	w.start(n0)
	t.Logf("figure: a member with a lost volume replaced (stale entry removed, joined, promoted): %s", time.Since(t0).Round(time.Millisecond))
	if n0.member.ID() == id0 {
		t.Fatalf("member with a lost volume kept ID %x", id0)
	}
	w.waitVoters(3)
	for _, e := range n0.member.Members() {
		if e.ID == id0 {
			t.Fatalf("stale entry %x of %s is still listed", id0, n0.name)
		}
	}
	if got := w.getFrom(n0, "/ca"); got != "the-one-ca" {
		t.Fatalf("%s rejoined and reads %q, want the-one-ca: it bootstrapped a new cluster", n0.name, got)
	}

	t.Log("two of three down: no removal, however long, and nothing lost when they return")
	w.stop(n1)
	w.stop(n2)
	downAt := time.Now()
	testhelpers.WaitFor(t, 50*time.Millisecond, 30*time.Second, "the remaining member to check again well past the dead-member timeout", func(context.Context) (bool, string) {
		st := n0.member.Status()
		return st.CheckedAt.After(downAt.Add(2 * deadMemberTimeout)), fmt.Sprintf("%+v", st)
	})
	if v, l := membership(n0); len(v) != 3 || len(l) != 0 {
		t.Fatalf("with 2 of 3 down, members changed: voters %v learners %v", v, l)
	}
	w.startAll(n1, n2)
	w.waitVoters(3)
	if got := w.getFrom(n2, "/ca"); got != "the-one-ca" {
		t.Fatalf("after quorum returned %s reads %q", n2.name, got)
	}

	t.Log("one of three dead past the timeout: the leader removes it, keeping quorum")
	w.stop(n2)
	t0 = time.Now()
	w.waitVoters(2)
	t.Logf("figure: a dead member removed %s after it stopped (dead-member timeout %s)", time.Since(t0).Round(time.Millisecond), deadMemberTimeout)
	put(t, w.client(), "/after-removal", "yes")

	t.Log("two left, one down: never shrunk to one member")
	w.stop(n1)
	downAt = time.Now()
	testhelpers.WaitFor(t, 50*time.Millisecond, 30*time.Second, "the remaining member to check again past the dead-member timeout", func(context.Context) (bool, string) {
		st := n0.member.Status()
		return st.CheckedAt.After(downAt.Add(2 * deadMemberTimeout)), fmt.Sprintf("%+v", st)
	})
	if v, _ := membership(n0); len(v) != 2 {
		t.Fatalf("with 1 of 2 down, members changed: voters %v", v)
	}
	w.start(n1)
	w.waitVoters(2)

	t.Log("the removed member comes back with its old data: it moves the data aside and joins anew")
	w.start(n2)
	w.waitVoters(3)
	if got := w.getFrom(n2, "/after-removal"); got != "yes" {
		t.Fatalf("re-added member reads %q", got)
	}
}

// TestScaleDown: members of ordinals the StatefulSet was scaled below are removed as soon as they stop,
// without waiting out the dead-member timeout (an hour here), one at a time.
func TestScaleDown(t *testing.T) {
	w := newWorld(t, 3)
	w.deadMemberTimeout = time.Hour
	w.replicas = 3
	w.start(w.nodes[0])
	w.startAll(w.nodes[1], w.nodes[2])
	w.waitVoters(3)

	t.Log("scaled to 2: the member of ordinal 2 goes when it stops")
	w.mu.Lock()
	w.replicas = 2
	w.mu.Unlock()
	w.stop(w.nodes[2])
	w.waitVoters(2)

	t.Log("scaled back to 3: the pod keeps its volume, moves its old data aside and joins anew")
	w.mu.Lock()
	w.replicas = 3
	w.mu.Unlock()
	w.start(w.nodes[2])
	w.waitVoters(3)
}

// TestInterruptedJoins: two members join a running cluster at once (a scale-up of a StatefulSet with
// parallel pod management) and each is killed part-way through its join, at several points (before it
// adds itself, as an unstarted learner, while it catches up, while it waits for the other), as a
// startup probe or an eviction would; started again, both become voting members and nothing is lost.
func TestInterruptedJoins(t *testing.T) {
	w := newWorld(t, 5)
	w.replicas = 5
	w.start(w.nodes[0])
	w.startAll(w.nodes[1], w.nodes[2])
	w.waitVoters(3)
	put(t, w.client(), "/ca", "the-one-ca")

	n3, n4 := w.nodes[3], w.nodes[4]
	for _, after := range []time.Duration{30 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond, time.Second, 2 * time.Second} {
		var wg sync.WaitGroup
		for i, nd := range []*node{n3, n4} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The two are killed at different moments, the second one later.
				if err := w.startFor(nd, after*time.Duration(i+1)); err == nil {
					w.stop(nd) // it got through: kill it now, a voting member or a learner
				}
			}()
		}
		wg.Wait()
	}
	t0 := time.Now()
	w.startAll(n3, n4)
	w.waitVoters(5)
	t.Logf("figure: two members joined after five interrupted tries each: %s", time.Since(t0).Round(time.Millisecond))
	for _, nd := range w.nodes {
		if got := w.getFrom(nd, "/ca"); got != "the-one-ca" {
			t.Fatalf("%s reads %q, want the-one-ca", nd.name, got)
		}
	}
}

// startFor starts nd's member with a context that ends after d, as a process killed after d would; it
// returns nil when the member started in time (it then runs until stopped).
func (w *world) startFor(nd *node, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	m, err := etcdcluster.Start(ctx, w.config(nd))
	if err != nil {
		return err
	}
	runCtx, runCancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(runCtx)
	}()
	w.mu.Lock()
	nd.member, nd.cancel, nd.done = m, runCancel, done
	store := w.store
	w.mu.Unlock()
	if store != nil {
		// As a replica's watch of the Secret tells it the state at once.
		m.SetPeerCA(store.state())
	}
	return nil
}

// TestStalledLearnerIsRemoved: a learner that was added and never started (its pod killed between its
// MemberAdd and its start, then crash-looping) holds etcd's one learner slot; the leader removes it after
// the stalled-learner timeout, long before the dead-member timeout, and the member waiting to join gets in.
// When the stalled one starts at last, it joins anew. A timeout this short can also remove a learner that
// is merely slow to start on a loaded machine: its start then fails and, as kubelet would restart its
// pod, it is started again (restarting).
func TestStalledLearnerIsRemoved(t *testing.T) {
	w := newWorld(t, 5)
	w.deadMemberTimeout = time.Hour
	w.stalledLearnerTimeout = 3 * time.Second
	w.restarting(w.nodes[0])
	for _, nd := range w.nodes[1:3] {
		w.restarting(nd)
	}
	w.waitVoters(3)

	n3, n4 := w.nodes[3], w.nodes[4]
	// etcd refuses a member add until every voter has been connected for a while: ask until it accepts.
	// An add whose reply was lost (the client's deadline passed while the cluster applied it) leaves the
	// learner listed, and every later add says its peer URL exists: then the listed learner is ours.
	var stalled uint64
	c := w.client()
	testhelpers.WaitFor(t, 50*time.Millisecond, 30*time.Second, "etcd to accept the learner", func(context.Context) (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := c.MemberAddAsLearner(ctx, []string{n3.peerURL})
		if err == nil {
			stalled = resp.Member.ID
			return true, ""
		}
		if !errors.Is(err, rpctypes.ErrPeerURLExist) {
			return false, fmt.Sprint(err)
		}
		list, lerr := c.MemberList(ctx)
		if lerr != nil {
			return false, fmt.Sprintf("%v; listing members: %v", err, lerr)
		}
		for _, m := range list.Members {
			if m.IsLearner && slices.Contains(m.PeerURLs, n3.peerURL) {
				stalled = m.ID
				return true, ""
			}
		}
		return false, fmt.Sprintf("%v, but no learner lists %s", err, n3.peerURL)
	})
	t0 := time.Now()
	w.restarting(n4)
	t.Logf("figure: a member joined past a stalled learner in %s (stalled-learner timeout %s)", time.Since(t0).Round(time.Millisecond), w.stalledLearnerTimeout)
	for _, e := range n4.member.Members() {
		if e.ID == stalled {
			t.Fatalf("the stalled learner %x is still listed", e.ID)
		}
	}
	w.restarting(n3)
	w.waitVoters(5)
}

// restarting starts nd's member and, when its start fails, starts it again (at most five times), as
// kubelet restarts a pod whose process exited.
func (w *world) restarting(nd *node) {
	w.t.Helper()
	var err error
	for range 5 {
		if err = w.startErr(nd); err == nil {
			return
		}
		w.t.Logf("%v; starting it again", err)
	}
	w.t.Fatal(err)
}
