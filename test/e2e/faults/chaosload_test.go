package faults

import (
	"bufio"
	"context"
	"crypto/elliptic"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// The load and measuring helpers of the fault tests in chaos_test.go.

// issueTarget is where a load sends its calls: kube-apiserver (as users do) or one certapi replica.
type issueTarget struct {
	name string
	c    versioned.Interface
}

// throughAPIServer sends calls through own's kube-apiserver, as the admin.
func throughAPIServer(t *testing.T, own *framework.ControlPlane) issueTarget {
	c, _ := testhelpers.Clients(t, own.AdminConfig)
	return issueTarget{name: framework.ProcessKubeAPIServer, c: c}
}

// toReplica sends calls straight to certapi replica i, not through kube-apiserver or the proxy.
func toReplica(t *testing.T, own *framework.ControlPlane, i int) issueTarget {
	cfg, err := own.CertapiReplicaConfig(i)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := testhelpers.Clients(t, cfg)
	return issueTarget{name: own.ReplicaName(i), c: c}
}

// issueCall is one servingcerts call and its answer.
type issueCall struct {
	target string
	start  time.Time
	took   time.Duration
	err    error
	cert   string // PEM, when it succeeded
}

func (c issueCall) end() time.Time { return c.start.Add(c.took) }

// Kinds of answers.
const (
	answerOK          = "ok"
	answerUnavailable = "503 with Retry-After" // certapi's own: client-go retries it
	answerOther       = "other"
)

// kind classifies an answer: success, certapi's 503 with Retry-After, or anything else (an error
// of another code, kube-apiserver's own 503 without Retry-After, a call that hit the guard).
func (c issueCall) kind() string {
	if c.err == nil {
		return answerOK
	}
	var status apierrors.APIStatus
	if apierrors.IsServiceUnavailable(c.err) && !fromAggregator(c.err) && errors.As(c.err, &status) &&
		status.Status().Details != nil && status.Status().Details.RetryAfterSeconds > 0 {
		return answerUnavailable
	}
	return answerOther
}

// issueLoad issues servingcerts at a fixed rate per target, open loop (a slow answer does not delay
// the next call), each call a single attempt without client-go's retries so that every answer is seen,
// and none longer than a guard: a call that needs the guard has hung.
type issueLoad struct {
	stop chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	mu    sync.Mutex
	calls []issueCall
}

// startLoad issues for the requests names in ns, rate calls per second on each target. The test's
// cleanup stops it, if the test does not first.
func startLoad(t *testing.T, ns string, names []string, rate int, guard time.Duration, targets ...issueTarget) *issueLoad {
	t.Helper()
	body := e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil)
	l := &issueLoad{stop: make(chan struct{})}
	interval := time.Second / time.Duration(rate)
	for _, tg := range targets {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
				name := names[n%len(names)]
				l.wg.Add(1)
				go func() {
					defer l.wg.Done()
					l.call(tg, ns, name, body, guard)
				}()
			}
		}()
	}
	t.Cleanup(l.finish)
	return l
}

func (l *issueLoad) call(tg issueTarget, ns, name string, body *certapiv1alpha1.ServingCert, guard time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	var out certapiv1alpha1.ServingCert
	start := time.Now()
	err := tg.c.CertapiV1alpha1().RESTClient().Post().Namespace(ns).Resource("servingcertrequests").Name(name).
		SubResource("servingcerts").Body(body).MaxRetries(0).Do(ctx).Into(&out)
	c := issueCall{target: tg.name, start: start, took: time.Since(start), err: err}
	if err == nil {
		c.cert = out.Status.Certificate
	}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
}

// finish stops issuing and waits for every call in flight to be answered. It is idempotent.
func (l *issueLoad) finish() {
	l.once.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// answered returns the calls answered so far, in the order of their answers.
func (l *issueLoad) answered() []issueCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// count returns how many answered calls match keep.
func (l *issueLoad) count(keep func(issueCall) bool) int {
	n := 0
	for _, c := range l.answered() {
		if keep(c) {
			n++
		}
	}
	return n
}

// callStats summarises calls: how many of each kind, the slowest, the 99th percentile.
type callStats struct {
	n      int
	byKind map[string]int
	max    time.Duration
	p99    time.Duration
}

func statsOf(calls []issueCall) callStats {
	s := callStats{n: len(calls), byKind: map[string]int{}}
	var took []time.Duration
	for _, c := range calls {
		s.byKind[c.kind()]++
		took = append(took, c.took)
	}
	if len(took) > 0 {
		slices.Sort(took)
		s.max = took[len(took)-1]
		s.p99 = took[(len(took)*99)/100]
	}
	return s
}

func (s callStats) String() string {
	return fmt.Sprintf("%d calls: %d ok, %d answered 503 with Retry-After, %d other; slowest %s, p99 %s",
		s.n, s.byKind[answerOK], s.byKind[answerUnavailable], s.byKind[answerOther], s.max.Round(time.Millisecond), s.p99.Round(time.Millisecond))
}

// failuresOf says when, after since, the failed calls among calls started and what the first few distinct
// errors were, for a failure message.
func failuresOf(calls []issueCall, since time.Time) string {
	var first, last time.Duration
	var msgs []string
	n := 0
	for _, c := range calls {
		if c.err == nil {
			continue
		}
		at := c.start.Sub(since)
		if n == 0 || at < first {
			first = at
		}
		last = max(last, at)
		n++
		if msg := c.err.Error(); len(msgs) < 3 && !slices.Contains(msgs, msg) {
			msgs = append(msgs, msg)
		}
	}
	if n == 0 {
		return "no call failed"
	}
	return fmt.Sprintf("%d failed calls started %s to %s after it, with errors %q", n, first.Round(time.Millisecond), last.Round(time.Millisecond), msgs)
}

// waitRecovered waits until a call that ended after back issued a certificate, and then until rate calls
// a second have issued for five more seconds (issuance must stay back), and returns when the first of
// them ended: the moment issuance recovered. what names the event, for the failure message.
func waitRecovered(t *testing.T, load *issueLoad, back time.Time, what string, rate int) time.Time {
	t.Helper()
	var recovered time.Time
	e2etest.Eventually(t, 60*time.Second, "issuance after "+what, func(context.Context) (bool, error) {
		for _, call := range load.answered() {
			if call.err == nil && call.end().After(back) && (recovered.IsZero() || call.end().Before(recovered)) {
				recovered = call.end()
			}
		}
		return !recovered.IsZero(), nil
	})
	e2etest.Eventually(t, 60*time.Second, "sustained issuance after "+what, func(context.Context) (bool, error) {
		return load.count(func(call issueCall) bool { return call.err == nil && call.start.After(recovered) }) >= 5*rate, nil
	})
	return recovered
}

// between returns the calls that started in [from, to).
func between(calls []issueCall, from, to time.Time) []issueCall {
	var out []issueCall
	for _, c := range calls {
		if !c.start.Before(from) && c.start.Before(to) {
			out = append(out, c)
		}
	}
	return out
}

// checkAnswers fails the test for every call that was neither a success nor certapi's 503 with
// Retry-After, or that took longer than bound; it reports at most a few of each.
func checkAnswers(t *testing.T, what string, calls []issueCall, bound time.Duration) {
	t.Helper()
	bad, slow := 0, 0
	for _, c := range calls {
		if c.kind() == answerOther {
			if bad++; bad <= 5 {
				t.Errorf("%s: a call to %s at %s failed after %s: %v", what, c.target, c.start.Format("15:04:05.000"), c.took.Round(time.Millisecond), c.err)
			}
		}
		if c.took > bound {
			if slow++; slow <= 5 {
				t.Errorf("%s: a call to %s at %s took %s, beyond the bound %s: %v", what, c.target, c.start.Format("15:04:05.000"), c.took.Round(time.Millisecond), bound, c.err)
			}
		}
	}
	if bad > 5 || slow > 5 {
		t.Errorf("%s: %d calls failed otherwise than with certapi's 503, %d took longer than %s", what, bad, slow, bound)
	}
}

// replicaMetrics scrapes certapi replica i's /metrics and returns the sum of every series of each
// metric in names (all labels), or an error when the replica does not answer.
func replicaMetrics(ctx context.Context, own *framework.ControlPlane, client *http.Client, i int, names ...string) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, own.CertapiReplicaURL(i)+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s's /metrics: %w", own.ReplicaName(i), err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, name := range names {
			if line == name || strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
				v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				if err != nil {
					return nil, fmt.Errorf("parsing %q: %w", line, err)
				}
				out[name] += v
			}
		}
	}
	return out, sc.Err()
}

// signatures returns how many certificates replica i has signed (certapi_signatures_total), and
// whether it says it leads (certapi_leader).
func signatures(t *testing.T, own *framework.ControlPlane, client *http.Client, i int) (float64, bool, error) {
	t.Helper()
	m, err := replicaMetrics(context.Background(), own, client, i, "certapi_signatures_total", "certapi_leader")
	if err != nil {
		return 0, false, err
	}
	return m["certapi_signatures_total"], m["certapi_leader"] == 1, nil
}

// leaderOnlyGauges are the series only a leading replica publishes.
var leaderOnlyGauges = []string{"certapi_ca_not_after_timestamp_seconds", "certapi_injection_targets"}

// publishesLeaderGauges reports whether replica i publishes any of leaderOnlyGauges.
func publishesLeaderGauges(own *framework.ControlPlane, client *http.Client, i int) (bool, error) {
	m, err := replicaMetrics(context.Background(), own, client, i, leaderOnlyGauges...)
	return len(m) > 0, err
}

// requestUIDs lists the ServingCertRequests of ns by name and UID, through kube-apiserver.
func requestUIDs(t *testing.T, c versioned.Interface, ns string) map[string]string {
	t.Helper()
	out := map[string]string{}
	e2etest.Eventually(t, 60*time.Second, "listing the ServingCertRequests", func(ctx context.Context) (bool, error) {
		list, err := c.CertapiV1alpha1().ServingCertRequests(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, r := range list.Items {
			out[r.Name] = string(r.UID)
		}
		return true, nil
	})
	return out
}

// oneCA checks that exactly one CA was ever created, that its record in etcd was written once (no
// replica replaced it), and that CertificateAuthority/default still shows it Active.
func oneCA(t *testing.T, own *framework.ControlPlane, serial string) {
	t.Helper()
	if n := countInLogs(t, own, "Created the cluster's CA"); n != 1 {
		t.Errorf("%d CAs were created, want exactly 1", n)
	}
	etcd, err := own.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := etcd.Get(ctx, e2etest.CAKey)
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Version != 1 {
		t.Errorf("CA record: %v, %d keys, want one written once", err, len(resp.Kvs))
	}
	if got := e2etest.ActiveSerial(t, own); got != serial {
		t.Errorf("the Active CA is %s, want the one CA %s", got, serial)
	}
}

// createRequests creates n ServingCertRequests r-0.. in ns and returns their names.
func createRequests(t *testing.T, c versioned.Interface, ns string, n int) []string {
	t.Helper()
	var names []string
	for i := range n {
		name := fmt.Sprintf("r-%d", i)
		if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), e2etest.Request(name, name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return names
}
