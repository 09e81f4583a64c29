package nodetest

import (
	"context"
	"crypto/elliptic"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/framework"
)

// CallBound is the longest a client-go caller can wait for a servingcerts call (docs/concepts.md,
// "Storage, leadership and replicas"): 11 x (--handoff-timeout 3 s + 1 s).
const CallBound = 44 * time.Second

// Load issues certificates through kube-apiserver from 4 callers, every 50 ms each, with client-go's own
// retries (a 503 or 429 with Retry-After is retried), until stopped. Check reads and resets its counts.
type Load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	calls   int
	failed  []Failure
	slowest time.Duration
	// lastOK is when the last call that succeeded started.
	lastOK time.Time
}

// Failure is one call that failed after client-go's retries.
type Failure struct {
	Start time.Time
	Took  time.Duration
	Err   error
}

func (f Failure) String() string {
	return fmt.Sprintf("%s (+%s): %v", f.Start.UTC().Format(time.StampMilli), f.Took.Round(time.Millisecond), f.Err)
}

// LoadFigures are the counts of a Load between two checks.
type LoadFigures struct {
	Calls, Failed int
	Slowest       time.Duration
}

func (f LoadFigures) String() string {
	return fmt.Sprintf("%d calls, %d failed, slowest %s", f.Calls, f.Failed, f.Slowest.Round(time.Millisecond))
}

// StartLoad starts the callers on the ServingCertRequest ns/name, which must exist; Stop ends them.
func StartLoad(t *testing.T, certapi versioned.Interface, ns, name string) *Load {
	t.Helper()
	body := &certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256()))}}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Load{cancel: cancel}
	for range 4 {
		l.wg.Go(func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				callCtx, cancel := context.WithTimeout(ctx, 2*CallBound)
				start := time.Now()
				_, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(callCtx, name, body, metav1.CreateOptions{})
				took := time.Since(start)
				cancel()
				if ctx.Err() != nil {
					return
				}
				l.mu.Lock()
				l.calls++
				l.slowest = max(l.slowest, took)
				if err != nil {
					l.failed = append(l.failed, Failure{Start: start, Took: took, Err: err})
				} else if start.After(l.lastOK) {
					l.lastOK = start
				}
				l.mu.Unlock()
			}
		})
	}
	t.Cleanup(l.Stop)
	return l
}

// Check fails the test if any call failed or took longer than CallBound since the last check, logs the
// counts with what happened meanwhile, resets them and returns them.
func (l *Load) Check(t *testing.T, what string) LoadFigures {
	t.Helper()
	f, failed := l.Take()
	t.Logf("%s: %s", what, f)
	if len(failed) > 0 {
		msgs := make([]string, len(failed))
		for i, x := range failed {
			msgs[i] = x.String()
		}
		t.Errorf("%s: %d failed calls: %s", what, len(failed), strings.Join(msgs, "; "))
	}
	if f.Slowest > CallBound {
		t.Errorf("%s: a call took %s, over the documented bound %s", what, f.Slowest, CallBound)
	}
	if f.Calls == 0 {
		t.Errorf("%s: no call ended", what)
	}
	return f
}

// Take returns the counts and the failed calls since the last check or take, and resets them.
func (l *Load) Take() (LoadFigures, []Failure) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := LoadFigures{Calls: l.calls, Failed: len(l.failed), Slowest: l.slowest}
	failed := l.failed
	l.calls, l.failed, l.slowest = 0, nil, 0
	return f, failed
}

// LastSuccess returns when the last call that succeeded started; zero before any.
func (l *Load) LastSuccess() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastOK
}

// Calls returns how many calls have ended since the last check.
func (l *Load) Calls() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls
}

// Stop ends the callers and waits for them. It is safe to call more than once.
func (l *Load) Stop() {
	l.cancel()
	l.wg.Wait()
}

// LeaderOf returns the identity in the Leader column of `kubectl get certificateauthority` (the pod's
// name: the manifests set --leader-identity=$(POD_NAME)), "" for none.
func LeaderOf(cp *framework.ControlPlane) (string, error) {
	out, err := KubectlErr(cp, "get", "certificateauthority", "default")
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		return "", fmt.Errorf("unexpected output %q", out)
	}
	// Columns are aligned, and some headers have spaces ("NOT AFTER"): the value starts where its header does.
	at := strings.Index(lines[0], "LEADER")
	if at >= 0 && at < len(lines[1]) {
		if f := strings.Fields(lines[1][at:]); len(f) > 0 {
			if f[0] == "<none>" {
				return "", nil
			}
			return f[0], nil
		}
	}
	return "", fmt.Errorf("no LEADER column in %q", out)
}

// LeaderPod is LeaderOf, failing the test when there is no leader.
func LeaderPod(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	l, err := LeaderOf(cp)
	if err != nil || l == "" {
		t.Fatalf("the leader: %q, %v", l, err)
	}
	return l
}
