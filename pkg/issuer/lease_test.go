package issuer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

func TestSigningMargin(t *testing.T) {
	for _, tc := range []struct {
		ttl, want time.Duration
	}{
		{15 * time.Second, 1500 * time.Millisecond}, // the default: a tenth
		{60 * time.Second, 6 * time.Second},
		{3 * time.Second, 500 * time.Millisecond}, // at least 500ms
		{2 * time.Second, 500 * time.Millisecond},
		{time.Second, 500 * time.Millisecond}, // never more than half
		{600 * time.Millisecond, 300 * time.Millisecond},
	} {
		if got := signingMargin(tc.ttl); got != tc.want {
			t.Errorf("signingMargin(%s) = %s, want %s", tc.ttl, got, tc.want)
		}
	}
}

func TestLeaseKnownValid(t *testing.T) {
	t0 := time.Now() // carries a monotonic reading, as the real ones do
	const ttl, margin = 15 * time.Second, 1500 * time.Millisecond
	for _, tc := range []struct {
		name      string
		now       time.Time
		renewedAt time.Time
		ttl       time.Duration
		want      bool
	}{
		{"just renewed", t0, t0, ttl, true},
		{"well within the TTL", t0.Add(10 * time.Second), t0, ttl, true},
		{"a moment before TTL minus margin", t0.Add(ttl - margin - time.Millisecond), t0, ttl, true},
		{"at TTL minus margin", t0.Add(ttl - margin), t0, ttl, false},
		{"inside the margin", t0.Add(14 * time.Second), t0, ttl, false},
		{"past the TTL: a paused leader resuming", t0.Add(ttl + 5*time.Second), t0, ttl, false},
		{"never granted", t0, time.Time{}, ttl, false},
		{"no TTL known", t0, t0, 0, false},
		{"renewal sent after now (clock read before it)", t0, t0.Add(time.Second), ttl, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := leaseKnownValid(tc.now, tc.renewedAt, tc.ttl, margin); got != tc.want {
				t.Errorf("leaseKnownValid(now=renewedAt%+v, ttl=%s) = %v, want %v", tc.now.Sub(tc.renewedAt), tc.ttl, got, tc.want)
			}
		})
	}
}

func TestRenewalInterval(t *testing.T) {
	for _, tc := range []struct{ ttl, want time.Duration }{
		{15 * time.Second, 3750 * time.Millisecond},
		{2 * time.Second, 500 * time.Millisecond},
		{200 * time.Millisecond, 100 * time.Millisecond},
	} {
		got := renewalInterval(tc.ttl)
		if got != tc.want {
			t.Errorf("renewalInterval(%s) = %s, want %s", tc.ttl, got, tc.want)
		}
		// At least two renewals fit in the time a lease stays known valid.
		if 2*got >= tc.ttl-signingMargin(tc.ttl) && tc.ttl >= time.Second {
			t.Errorf("renewalInterval(%s) = %s leaves room for fewer than two renewals", tc.ttl, got)
		}
	}
}

// fakeMonotonic is a settable clock for the lease; step, when set, is added after every reading.
type fakeMonotonic struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration
}

func (c *fakeMonotonic) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(c.step)
	return t
}

// peek returns the clock's time without a step.
func (c *fakeMonotonic) peek() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeMonotonic) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// leadingIssuer is an Issuer that leads with a fresh CA, its lease granted at clk's current time.
func leadingIssuer(t *testing.T, clk *fakeMonotonic, ttl time.Duration, onIssued func()) *Issuer {
	t.Helper()
	ca := signertest.NewCA(t, time.Now(), 24*time.Hour)
	i := &Issuer{cfg: Config{Identity: "test", ClusterDomain: "cluster.local", Clock: clock.RealClock{},
		OnIssued: func(Request, *Result) { onIssued() }}, now: clk.now}
	i.leaseGranted(clk.peek(), ttl)
	i.setLeading(true, signer.Authorities{Active: ca})
	return i
}

func testRequest(t *testing.T) Request {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return Request{Namespace: "ns", Name: "r", ServiceName: "svc", Duration: time.Hour, PublicKey: key.Public(), Path: PathServingCerts}
}

// TestSignOnlyWhileTheLeaseIsKnownValid: a leader signs while its lease is known valid, refuses once the
// lease could have expired (a paused leader resuming), and signs again once etcd renews the lease.
func TestSignOnlyWhileTheLeaseIsKnownValid(t *testing.T) {
	const ttl = 15 * time.Second
	clk := &fakeMonotonic{t: time.Now()}
	issued := 0
	i := leadingIssuer(t, clk, ttl, func() { issued++ })
	req := testRequest(t)

	if _, err := i.Sign(req); err != nil {
		t.Fatalf("signing right after the grant: %v", err)
	}
	clk.advance(ttl - signingMargin(ttl) - time.Millisecond)
	if _, err := i.Sign(req); err != nil {
		t.Fatalf("signing just before TTL minus the margin: %v", err)
	}
	// Paused past the TTL: the session still looks fine in memory, but the lease may be gone.
	clk.advance(10 * time.Second)
	if _, err := i.Sign(req); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("signing after the lease could have expired: %v, want ErrNotLeading", err)
	}
	if _, _, ok := i.Signing(); ok {
		t.Error("Signing reports a CA after the lease could have expired")
	}
	if _, ok := i.Bundle(); ok {
		t.Error("Bundle reports a bundle after the lease could have expired")
	}
	if i.Leading() {
		t.Error("Leading after the lease could have expired")
	}
	// etcd answers a keepalive sent now: the lease never expired, and signing resumes.
	i.leaseRenewed(context.Background(), clk.peek(), ttl)
	if _, err := i.Sign(req); err != nil {
		t.Fatalf("signing after a renewal: %v", err)
	}
	// A late answer to an older keepalive does not move the renewal time back.
	i.leaseRenewed(context.Background(), clk.peek().Add(-time.Minute), ttl)
	if !i.leaseValid() {
		t.Error("an older renewal moved the lease's known validity back")
	}
	if issued != 3 {
		t.Errorf("OnIssued called %d times, want 3", issued)
	}
}

// TestSignDiscardsASignatureFinishedTooLate: a leader paused in the middle of a signature, past the
// lease's TTL, returns no certificate and reports none.
func TestSignDiscardsASignatureFinishedTooLate(t *testing.T) {
	const ttl = 3 * time.Second
	clk := &fakeMonotonic{t: time.Now()}
	issued := 0
	i := leadingIssuer(t, clk, ttl, func() { issued++ })
	// Every reading of the clock is a TTL after the one before: valid when checked before signing,
	// expired when checked after.
	clk.step = ttl
	res, err := i.Sign(testRequest(t))
	if !errors.Is(err, ErrNotLeading) || res != nil {
		t.Fatalf("Sign across a pause: %v, %v; want no certificate and ErrNotLeading", res, err)
	}
	if issued != 0 {
		t.Errorf("OnIssued called %d times for a discarded signature", issued)
	}
}

// TestSignAsLeaderWaitsForARenewal: a leader whose lease lapsed (etcd unreachable for a while) holds a
// call until etcd renews the lease, then signs; it gives up with ErrNoLeader at the call's deadline, and
// lets the call go to another leader when its term ends meanwhile.
func TestSignAsLeaderWaitsForARenewal(t *testing.T) {
	const ttl = 15 * time.Second
	req := testRequest(t)
	lapsed := func() (*Issuer, *fakeMonotonic) {
		clk := &fakeMonotonic{t: time.Now()}
		i := leadingIssuer(t, clk, ttl, func() {})
		clk.advance(ttl) // no renewal answered for a whole TTL
		return i, clk
	}
	type outcome struct {
		res *Result
		led bool
		err error
	}
	run := func(i *Issuer, ctx context.Context) <-chan outcome {
		out := make(chan outcome, 1)
		go func() {
			res, led, err := i.signAsLeader(ctx, req)
			out <- outcome{res, led, err}
		}()
		return out
	}
	// waitBlocked returns once the call is waiting: it has taken the lease channel and found no valid lease.
	waitBlocked := func(t *testing.T, i *Issuer) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return i.leaseLapseLogged.Load(), nil
		}); err != nil {
			t.Fatalf("the call never waited for the lease: %v", err)
		}
	}

	t.Run("renewed", func(t *testing.T) {
		i, clk := lapsed()
		out := run(i, context.Background())
		waitBlocked(t, i)
		i.leaseRenewed(context.Background(), clk.peek(), ttl)
		if o := <-out; o.err != nil || !o.led || o.res == nil {
			t.Fatalf("after the renewal: %+v, want a certificate", o)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		i, _ := lapsed()
		ctx, cancel := context.WithCancel(context.Background())
		out := run(i, ctx)
		waitBlocked(t, i)
		cancel()
		if o := <-out; !errors.Is(o.err, ErrNoLeader) || !o.led || o.res != nil {
			t.Fatalf("at the deadline: %+v, want ErrNoLeader", o)
		}
	})
	t.Run("term ended", func(t *testing.T) {
		i, _ := lapsed()
		out := run(i, context.Background())
		waitBlocked(t, i)
		i.setLeading(false, signer.Authorities{})
		if o := <-out; o.led || o.err != nil || o.res != nil {
			t.Fatalf("after the term ended: %+v, want led=false", o)
		}
	})
	t.Run("not leading", func(t *testing.T) {
		i, _ := lapsed()
		i.setLeading(false, signer.Authorities{})
		if res, led, err := i.signAsLeader(context.Background(), req); led || err != nil || res != nil {
			t.Fatalf("a follower: %v, %v, %v; want led=false", res, led, err)
		}
	})
}
