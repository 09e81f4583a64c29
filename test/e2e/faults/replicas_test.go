package faults

import (
	"context"
	"crypto/elliptic"
	"errors"
	"fmt"

	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

func waitLeader(t *testing.T, own *framework.ControlPlane, timeout time.Duration) int {
	t.Helper()
	leader := -1
	e2etest.Eventually(t, timeout, "one replica to lead", func(context.Context) (bool, error) {
		leader = e2etest.LeaderOf(t, own)
		return leader >= 0, nil
	})
	return leader
}

func countInLogs(t *testing.T, own *framework.ControlPlane, s string) int {
	t.Helper()
	n := 0
	for i := 0; i < own.Replicas(); i++ {
		data, err := os.ReadFile(own.Logs()[own.ReplicaName(i)])
		if err != nil {
			t.Fatal(err)
		}
		n += strings.Count(string(data), s)
	}
	return n
}

// leadershipLines are the log lines that tell a term's story: elections, terms, lease renewals, handoffs.
var leadershipLines = regexp.MustCompile(`Campaigning|Became leader|Leading:|Lost leadership|Resigned|Not signing|election lease|handoff|Handoff|"Starting" logger="rotation"`)

// logLeadershipOnFailure logs, when t has failed, every replica's leadership lines (leadershipLines):
// the framework prints only the last lines of each log, and a term's story starts long before them.
func logLeadershipOnFailure(t *testing.T, own *framework.ControlPlane) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for i := 0; i < own.Replicas(); i++ {
			name := own.ReplicaName(i)
			data, err := os.ReadFile(own.Logs()[name])
			if err != nil {
				t.Logf("%s's log: %v", name, err)
				continue
			}
			var lines []string
			for _, l := range strings.Split(string(data), "\n") {
				if leadershipLines.MatchString(l) {
					lines = append(lines, l)
				}
			}
			t.Logf("%s's leadership lines (%d):\n%s", name, len(lines), strings.Join(lines[max(0, len(lines)-80):], "\n"))
		}
	})
}

// TestColdStartWithThreeReplicas starts three replicas together on an empty etcd, several times: each time
// exactly one CA is created and stored.
func TestColdStartWithThreeReplicas(t *testing.T) {
	for round := 0; round < 3; round++ {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			own := framework.StartT(t, framework.Options{CertapiReplicas: 3, CertapiReplicaArgs: framework.LeaderIdentityArgs})
			serial := e2etest.ActiveSerial(t, own)
			if n := countInLogs(t, own, "Created the cluster's CA"); n != 1 {
				t.Fatalf("%d replicas created a CA, want exactly 1", n)
			}
			etcd, err := own.EtcdClient()
			if err != nil {
				t.Fatal(err)
			}
			defer etcd.Close()
			resp, err := etcd.Get(context.Background(), e2etest.CAKey)
			if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Version != 1 {
				t.Fatalf("CA record: %v, %d keys, want one written once", err, len(resp.Kvs))
			}
			t.Logf("one CA, serial %s", serial)
		})
	}
}

// issueLoop issues through kube-apiserver from workers goroutines, one call at a time each, until stop
// is closed, and reports every call's outcome.
type outcome struct {
	err  error
	took time.Duration
}

func issueLoop(t *testing.T, own *framework.ControlPlane, ns, name string, workers int, stop <-chan struct{}, bound time.Duration) (func() []outcome, *sync.WaitGroup) {
	c, _ := testhelpers.Clients(t, own.AdminConfig)
	body := e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil)
	var mu sync.Mutex
	var results []outcome
	var wg sync.WaitGroup
	worker := func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			// The guard is longer than the documented bound: a call that needs it has hung.
			ctx, cancel := context.WithTimeout(context.Background(), bound+10*time.Second)
			start := time.Now()
			_, err := c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, name, body, metav1.CreateOptions{})
			cancel()
			mu.Lock()
			results = append(results, outcome{err: err, took: time.Since(start)})
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond): // pacing, not synchronisation
			}
		}
	}
	for range workers {
		wg.Add(1)
		go worker()
	}
	return func() []outcome {
		mu.Lock()
		defer mu.Unlock()
		return append([]outcome(nil), results...)
	}, &wg
}

// TestFailover kills the leader with SIGKILL while a client issues in a loop through kube-apiserver and a
// round-robin proxy in front of three replicas, then stops the next leader with SIGTERM.
func TestFailover(t *testing.T) {
	const ttl, handoff = 3 * time.Second, 2 * time.Second
	// client-go retries a 503 with Retry-After (1s) up to 10 times: 11 attempts at most.
	bound := 11 * (handoff + time.Second)
	own := framework.StartT(t, framework.Options{
		CertapiReplicas:    3,
		CertapiReplicaArgs: framework.LeaderIdentityArgs,
		CertapiArgs:        []string{"--leader-session-ttl=" + ttl.String(), "--handoff-timeout=" + handoff.String()},
	})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), e2etest.Request("loop", "loop"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	serial := e2etest.ActiveSerial(t, own)
	leader := waitLeader(t, own, 30*time.Second)

	stop := make(chan struct{})
	results, wg := issueLoop(t, own, ns, "loop", 1, stop, bound)
	e2etest.Eventually(t, 30*time.Second, "the loop to issue", func(context.Context) (bool, error) { return len(results()) > 5, nil })

	killedAt := time.Now()
	if err := own.KillReplica(leader); err != nil {
		t.Fatal(err)
	}
	next := waitLeader(t, own, ttl+10*time.Second)
	took := time.Since(killedAt)
	if next == leader {
		t.Fatal("the killed replica still leads")
	}
	t.Logf("replica %d took over %s after replica %d was killed (session TTL %s)", next, took.Round(time.Millisecond), leader, ttl)
	if took > ttl+5*time.Second {
		t.Errorf("takeover took %s, want within the session TTL %s (plus polling)", took, ttl)
	}
	if got := e2etest.ActiveSerial(t, own); got != serial {
		t.Errorf("new leader's CA %s, want the same CA %s", got, serial)
	}
	n := len(results())
	e2etest.Eventually(t, bound+30*time.Second, "issuance to resume", func(context.Context) (bool, error) {
		r := results()
		return len(r) > n+5 && r[len(r)-1].err == nil, nil
	})
	afterKill := len(results())

	// Graceful: SIGTERM resigns at once and no call fails.
	if err := own.StopReplica(next); err != nil {
		t.Fatal(err)
	}
	third := waitLeader(t, own, 10*time.Second)
	e2etest.Eventually(t, 30*time.Second, "more issuance after the graceful stop", func(context.Context) (bool, error) {
		return len(results()) > afterKill+20, nil
	})
	close(stop)
	wg.Wait()

	var ok, unavailable int
	for i, r := range results() {
		switch {
		case r.err == nil:
			ok++
		case i < afterKill && apierrors.IsServiceUnavailable(r.err):
			unavailable++
		default:
			t.Errorf("call %d failed after %s: %v", i, r.took, r.err)
		}
		if errors.Is(r.err, context.DeadlineExceeded) || r.took > bound+5*time.Second {
			t.Errorf("call %d hung for %s (bound %s)", i, r.took, bound)
		}
		if i >= afterKill && r.err != nil {
			t.Errorf("call %d after the graceful stop failed: %v", i, r.err)
		}
	}
	t.Logf("%d calls: %d ok, %d answered 503 during the kill; leaders %d -> %d -> %d", len(results()), ok, unavailable, leader, next, third)
	// One replica is left: the killed leader's key expired with its session and the stopped one resigned.
	if n := countLeaderKeys(t, own, 1); n != 1 {
		t.Errorf("election keys: %d, want 1 (one per running replica)", n)
	}
}

// TestGracefulStopUnderConcurrentLoad stops, with SIGTERM, the replica that kube-apiserver's proxied
// calls go to while eight clients issue concurrently through kube-apiserver. No call may fail: a replica
// that shuts down must hand its callers to the others (429 with Retry-After, which client-go retries),
// never close a connection under calls that kube-apiserver has already sent, which its aggregator can
// only answer with a 503 of its own that no client retries (kubernetes/kubernetes#135285: over HTTP/2,
// one GOAWAY fails every POST in flight on the connection).
func TestGracefulStopUnderConcurrentLoad(t *testing.T) {
	const handoff = 2 * time.Second
	// client-go retries a 429 or 503 with Retry-After up to 10 times; the shutdown 429 says 5 s.
	bound := 11 * (handoff + 5*time.Second)
	own := framework.StartT(t, framework.Options{
		CertapiReplicas:    3,
		CertapiReplicaArgs: framework.LeaderIdentityArgs,
		CertapiArgs:        []string{"--handoff-timeout=" + handoff.String()},
	})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), e2etest.Request("load", "load"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, own, 30*time.Second)

	stop := make(chan struct{})
	results, wg := issueLoop(t, own, ns, "load", 32, stop, bound)
	e2etest.Eventually(t, 30*time.Second, "the clients to issue", func(context.Context) (bool, error) { return len(results()) > 40, nil })

	// The replica with the most connections from kube-apiserver carries its proxied calls.
	busiest, most := -1, 0
	for i, n := range own.ProxyOpenConnections() {
		if n > most {
			busiest, most = i, n
		}
	}
	if busiest < 0 {
		t.Fatal("no replica has a connection from kube-apiserver")
	}
	before := len(results())
	if err := own.StopReplica(busiest); err != nil {
		t.Fatal(err)
	}
	t.Logf("stopped replica %d (%d open connections) after %d calls", busiest, most, before)
	e2etest.Eventually(t, bound+30*time.Second, "more issuance after the stop", func(context.Context) (bool, error) {
		return len(results()) > before+80, nil
	})
	close(stop)
	wg.Wait()

	var failed int
	var slowest time.Duration
	for i, r := range results() {
		slowest = max(slowest, r.took)
		if r.err != nil {
			failed++
			if failed <= 5 {
				t.Errorf("call %d failed after %s: %v (%s)", i, r.took, r.err, serverText(r.err))
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d calls failed; want none", failed, len(results()))
	}
	if slowest > bound {
		t.Errorf("slowest call %s, want within %s", slowest, bound)
	}
	t.Logf("%d calls, %d failed, slowest %s", len(results()), failed, slowest.Round(time.Millisecond))
}

func countLeaderKeys(t *testing.T, own *framework.ControlPlane, want int64) int64 {
	t.Helper()
	etcd, err := own.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	var n int64
	e2etest.Eventually(t, 30*time.Second, "the dead leader's election key to expire", func(ctx context.Context) (bool, error) {
		resp, err := etcd.Get(ctx, "/registry/certapi.dev/leader", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return false, err
		}
		n = resp.Count
		return n == want, nil
	})
	return n
}

// TestNoLeaderAnswers503WithRetryAfter kills the leader of two replicas whose session TTL is long, so no
// replica leads for a while: a call answers 503 with Retry-After after the handoff timeout, and a
// client-go caller with its default retries gives up within the documented bound instead of hanging.
//
// What a client-go user sees right after the kill: kube-apiserver may still send a call over its pooled
// connection to the killed replica (through the proxy that stands in for the Service), and its aggregator
// then answers 503 itself, in plain text and without Retry-After, which client-go does not retry. No
// replica can answer for a process that is gone. The contract is that this lasts only until
// kube-apiserver reaches a surviving replica, within aggregatorWindow of the kill; from then on every
// call gets certapi's own 503 with Retry-After, which client-go retries, within the documented bound.
func TestNoLeaderAnswers503WithRetryAfter(t *testing.T) {
	const handoff = time.Second
	// kube-apiserver drops a connection to the killed replica on its first failed request (or when the
	// proxy closes it), and its availability check passes again on a fresh connection within moments.
	const aggregatorWindow = 10 * time.Second
	own := framework.StartT(t, framework.Options{
		CertapiReplicas:    2,
		CertapiReplicaArgs: framework.LeaderIdentityArgs,
		CertapiArgs:        []string{"--leader-session-ttl=120s", "--handoff-timeout=" + handoff.String()},
	})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), e2etest.Request("r", "r"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e2etest.ActiveSerial(t, own)
	leader := waitLeader(t, own, 30*time.Second)
	killedAt := time.Now()
	if err := own.KillReplica(leader); err != nil {
		t.Fatal(err)
	}
	body := e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil)

	// One attempt at a time, no client retries: the follower answers 503 with Retry-After after the
	// handoff timeout. Before kube-apiserver reaches it, only kube-apiserver's own 503 for the killed
	// replica is accepted, and only within aggregatorWindow of the kill.
	var single time.Duration
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), handoff+30*time.Second)
		start := time.Now()
		err := c.CertapiV1alpha1().RESTClient().Post().Namespace(ns).Resource("servingcertrequests").Name("r").SubResource("servingcerts").
			Body(body).MaxRetries(0).Do(ctx).Error()
		took := time.Since(start)
		cancel()
		if fromAggregator(err) {
			if since := time.Since(killedAt); since > aggregatorWindow {
				t.Fatalf("attempt %d, %s after the kill: still kube-apiserver's 503 without Retry-After (%q); want certapi's 503 with Retry-After within %s",
					attempt, since.Round(time.Millisecond), serverText(err), aggregatorWindow)
			}
			t.Logf("attempt %d, %s after the kill: kube-apiserver's own 503 for the killed replica: %q", attempt, time.Since(killedAt).Round(time.Millisecond), serverText(err))
			time.Sleep(100 * time.Millisecond)
			continue
		}
		var status apierrors.APIStatus
		if !apierrors.IsServiceUnavailable(err) || !errors.As(err, &status) || status.Status().Details == nil || status.Status().Details.RetryAfterSeconds != 1 {
			t.Fatalf("attempt %d with no leader: %v (details %+v), want 503 with Retry-After 1", attempt, err, status)
		}
		if took > handoff+3*time.Second {
			t.Errorf("the 503 took %s, want about the handoff timeout %s", took, handoff)
		}
		single = took
		break
	}

	// client-go's default: up to 10 retries honouring Retry-After, then certapi's 503. Bounded, never a
	// hang; a 503 from kube-apiserver, which client-go does not retry, would end it early.
	bound := 11 * (handoff + time.Second)
	start := time.Now()
	_, err := c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(context.Background(), "r", body, metav1.CreateOptions{})
	took := time.Since(start)
	var status apierrors.APIStatus
	if !apierrors.IsServiceUnavailable(err) || fromAggregator(err) || !errors.As(err, &status) || status.Status().Details == nil || status.Status().Details.RetryAfterSeconds != 1 {
		t.Fatalf("client-go call with no leader: %v (details %+v), want certapi's 503 with Retry-After 1", err, status)
	}
	if took > bound+5*time.Second || took < 5*(handoff+time.Second) {
		t.Errorf("client-go gave up after %s; documented bound %s (11 x (handoff-timeout + Retry-After))", took, bound)
	}
	t.Logf("single attempt: 503 after %s; client-go with retries: 503 after %s (bound %s)", single.Round(time.Millisecond), took.Round(time.Millisecond), bound)
}

// fromAggregator reports whether err is a 503 that kube-apiserver's aggregator wrote itself, as when it
// cannot reach the aggregated server: plain text, not an API Status as certapi answers. client-go does
// not retry it (it has no Retry-After).
func fromAggregator(err error) bool {
	return apierrors.IsServiceUnavailable(err) && apierrors.IsUnexpectedServerError(err)
}

// serverText is the text of a response that was not an API Status, as client-go keeps it in err.
func serverText(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Details != nil {
		for _, c := range status.Status().Details.Causes {
			if c.Type == metav1.CauseTypeUnexpectedServerResponse {
				return c.Message
			}
		}
	}
	return ""
}
