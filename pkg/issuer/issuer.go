package issuer

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/certapi/certapi/pkg/signer"
)

// Config is what an Issuer needs.
type Config struct {
	// Client reaches the etcd that holds certapi's objects.
	Client *clientv3.Client
	// Prefix is certapi's key prefix in etcd, e.g. /registry/certapi.dev.
	Prefix string
	// Transformer encrypts the CA record as the storage layer would (identity when not configured).
	Transformer value.Transformer
	// Identity names this replica in the election, the log and the leader metric.
	Identity string
	// SessionTTL is the etcd session's lease: a leader that stops renewing it loses leadership after this.
	SessionTTL time.Duration
	// HandoffTimeout bounds how long a follower waits for the leader to answer.
	HandoffTimeout time.Duration
	// ClusterDomain is the suffix of fully qualified Service names.
	ClusterDomain string
	// CADuration is the lifetime of a CA this replica creates.
	CADuration time.Duration
	// MaxCertificateDuration, when positive, caps every leaf's lifetime (see signer.RotationPolicy).
	MaxCertificateDuration time.Duration
	// Clock is the time source; nil means the real clock.
	Clock clock.PassiveClock
	// OnIssued, when set, is called on the leader after each signature, by either path.
	OnIssued func(req Request, res *Result)
	// OnLeading, when set, is started in a goroutine each time this replica becomes leader, with a context
	// that ends when leadership ends. It must return when that context ends. If it returns an error
	// before then, the term ends: this replica resigns, and the election (this replica included) starts
	// over after a backoff. A leader runs all of its loops or does not lead.
	OnLeading func(ctx context.Context) error
	// OnLeadershipChange, when set, is called with true when this replica starts leading and false when it stops.
	OnLeadershipChange func(leading bool)
}

// Issuer signs certificates for every replica: directly on the leader, through an etcd handoff elsewhere.
type Issuer struct {
	cfg   Config
	store caStore

	mu      sync.RWMutex
	leading bool
	auth    signer.Authorities
	bundle  []byte
	modRev  int64
	// termKey and termRev identify the election key of the current or last term; CA writes are fenced on them.
	termKey string
	termRev int64
	// leaseRenewedAt is when the last successful grant or keepalive of the election lease was sent, and
	// leaseTTL the TTL etcd answered, on the local CLOCK_BOOTTIME (now, bootTime): see lease.go.
	leaseRenewedAt time.Time
	leaseTTL       time.Duration
	// leaseLapseLogged is set once a refusal to sign for want of a known-valid lease has been logged.
	leaseLapseLogged atomic.Bool
	// leaseCh is closed and replaced when the lease becomes known valid again or the term ends, to wake
	// the calls that wait for that (signAsLeader).
	leaseCh chan struct{}
	// now reads the local clock that does not jump and counts suspended time (bootTime), for the lease
	// and the publication of Next; tests replace it.
	now func() time.Time
	// published is the Next CA this replica published in this term, and when by now: the grace period
	// must pass on that clock too, not only on the wall clock (see effective).
	published struct {
		next *x509.Certificate
		at   time.Time
	}

	servers serverLease

	listeners listeners
}

// New returns an Issuer; Run makes it take part in the election.
func New(cfg Config) (*Issuer, error) {
	if cfg.Client == nil || cfg.Prefix == "" || cfg.Identity == "" {
		return nil, errors.New("issuer: Client, Prefix and Identity are required")
	}
	if cfg.Transformer == nil {
		cfg.Transformer = identityTransformer{}
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 15 * time.Second
	}
	if cfg.HandoffTimeout <= 0 {
		cfg.HandoffTimeout = 3 * time.Second
	}
	if cfg.CADuration <= 0 {
		cfg.CADuration = signer.DefaultCADuration
	}
	return &Issuer{cfg: cfg, now: bootTime, store: &keystore{client: cfg.Client, key: cfg.Prefix + "/" + CAKeysResource + "/default", transformer: cfg.Transformer}}, nil
}

// Signing returns the Active CA and the trust bundle while this replica leads and its election lease is
// known to be alive (see lease.go).
func (i *Issuer) Signing() (*signer.CA, []byte, bool) {
	auth, bundle, ok := i.current()
	return auth.Active, bundle, ok
}

// State returns the CAs and the rotation's progress while this replica leads and its election lease is
// known to be alive.
func (i *Issuer) State() (signer.Authorities, bool) {
	auth, _, ok := i.current()
	return auth, ok
}

// current returns the CAs and the bundle while this replica leads and its election lease is known to be
// alive; a leader whose lease may have expired says so in the log, once per lapse.
func (i *Issuer) current() (signer.Authorities, []byte, bool) {
	i.mu.RLock()
	leading, auth, bundle, valid := i.leading, i.effectiveLocked(i.auth, i.cfg.Clock.Now()), i.bundle, i.leaseValidLocked()
	i.mu.RUnlock()
	if !leading || auth.Active == nil {
		return signer.Authorities{}, nil, false
	}
	if !valid {
		i.noteLeaseLapse()
		return signer.Authorities{}, nil, false
	}
	return auth, bundle, true
}

// Bundle returns the trust bundle while this replica leads; it satisfies the injector's bundle source.
func (i *Issuer) Bundle() ([]byte, bool) {
	_, bundle, ok := i.Signing()
	return bundle, ok
}

// RotationRequest is what the rotation loop knows beyond the clock.
type RotationRequest struct {
	// ForceRotation and Distrust are the CertificateAuthority's spec values.
	ForceRotation, Distrust string
	// NextEverywhere: every injectable target holds the current bundle.
	NextEverywhere bool
	// Reissued: every delivered certificate comes from the Active CA.
	Reissued bool
	// CADuration is the lifetime of a CA made now.
	CADuration time.Duration
	Policy     signer.RotationPolicy
}

// Rotate applies the one rotation step that is due, if any, persisting it with a fenced write before it
// takes effect in memory, and returns it (none, or one). Only the leader can rotate. One step per call,
// whatever drives it: each step is planned with fresh inputs and a fresh reading of the clock, so a
// clock that jumped cannot run a whole rotation (publish, switch, retire) in one go, and a step that
// needs the world to react (targets to take the new bundle, certificates to be re-issued) is followed
// only once it has. The rotation loop calls again right after a step (it re-arms on the bundle change
// and on NextDue).
//
// An error wrapping signer.ErrClockBehind means the clock reads earlier than the CA record allows:
// nothing is saved, and signing goes on with the Active CA while it can.
func (i *Issuer) Rotate(ctx context.Context, req RotationRequest) ([]signer.RotationStep, error) {
	i.mu.RLock()
	leading, stored, modRev, key, rev := i.leading, i.auth, i.modRev, i.termKey, i.termRev
	i.mu.RUnlock()
	if !leading || stored.Active == nil {
		return nil, ErrNotLeading
	}
	now := i.cfg.Clock.Now()
	i.mu.RLock()
	auth := i.effectiveLocked(stored, now)
	i.mu.RUnlock()
	next, step, err := auth.Plan(signer.RotationInput{
		Now: now, ForceRotation: req.ForceRotation, Distrust: req.Distrust,
		NextEverywhere: req.NextEverywhere, Reissued: req.Reissued,
		NewCA: func() (*signer.CA, error) {
			return signer.NewCA(signer.CAOptions{ClusterDomain: i.cfg.ClusterDomain, Duration: req.CADuration, Now: now})
		},
	}, req.Policy)
	if err != nil {
		return nil, fmt.Errorf("planning the next rotation step: %w", err)
	}
	if step == signer.StepNone {
		return nil, nil
	}
	if next.Next != nil && next.Next == stored.Next {
		next.NextPublished = stored.NextPublished // the record keeps the wall-clock time it was published at
	}
	newRev, err := i.store.save(ctx, next, modRev, key, rev)
	if err != nil {
		return nil, fmt.Errorf("persisting rotation step %s: %w", step, err)
	}
	i.mu.Lock()
	if i.leading && i.termKey == key {
		i.auth, i.bundle, i.modRev = next, next.Bundle(), newRev
		if step == signer.StepPublishNext {
			i.published.next, i.published.at = next.Next.Certificate, i.now()
		}
	}
	i.mu.Unlock()
	i.listeners.notify()
	klog.InfoS("CA rotation step", "step", step, "active", signer.FormatSerialNumber(next.Active.Certificate.SerialNumber), "bundleSize", len(next.Certificates()))
	return []signer.RotationStep{step}, nil
}

// effectiveLocked is a as the rotation sees it at wallNow: when this replica published a's Next CA in
// this term and the wall clock has since run ahead of the clock that does not jump by more than
// signer.ClockTolerance (it jumped forward), Next counts as published at wallNow minus the time that
// really passed. So the grace period passes in real time, and a jump of the wall clock cannot make
// Next sign before every bundle had the time to take it. The caller holds i.mu.
func (i *Issuer) effectiveLocked(a signer.Authorities, wallNow time.Time) signer.Authorities {
	if a.Next == nil || i.published.next == nil || !a.Next.Certificate.Equal(i.published.next) {
		return a
	}
	if real := wallNow.Add(-i.now().Sub(i.published.at)); real.After(a.NextPublished.Add(signer.ClockTolerance)) {
		a.NextPublished = real
	}
	return a
}

// HandoffTimeout is how long a follower waits for the leader to sign (Config.HandoffTimeout, defaulted).
func (i *Issuer) HandoffTimeout() time.Duration { return i.cfg.HandoffTimeout }

// Leading reports whether this replica leads and can sign.
func (i *Issuer) Leading() bool {
	_, _, ok := i.Signing()
	return ok
}

// Leader returns the identity of the replica that holds the leader election now, read from etcd (this
// replica's own identity, without a read, while it leads). ok is false when no replica holds it: nobody
// signs, delivers Secrets or injects bundles until one does. A replica that has just won the election and
// is still loading the CA counts as the leader.
func (i *Issuer) Leader(ctx context.Context) (identity string, ok bool, err error) {
	if i.Leading() {
		return i.cfg.Identity, true, nil
	}
	// The election's keys are <prefix>/leader/<lease>; the one created first is the leader's
	// (concurrency.Election.Leader, which needs a session of its own).
	resp, err := i.cfg.Client.Get(ctx, i.cfg.Prefix+"/leader/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", false, fmt.Errorf("reading the leader election from etcd: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return "", false, nil
	}
	return string(resp.Kvs[0].Value), true, nil
}

// Issue signs req: here when this replica leads, otherwise through the leader. ErrNoLeader (wrapped) means
// nobody could sign in time.
func (i *Issuer) Issue(ctx context.Context, req Request) (*Result, error) {
	if res, led, err := i.signAsLeader(ctx, req); led {
		return res, err
	}
	return i.handoff(ctx, req)
}

// signAsLeader signs req here when this replica leads; led is false when it does not (or no longer does),
// and req should go to the leader there is. A leader whose election lease is not known to be alive (etcd
// was unreachable for a while) waits, within ctx, for etcd to renew the lease, and signs then, or for the
// term to end; at ctx's end the error wraps ErrNoLeader.
func (i *Issuer) signAsLeader(ctx context.Context, req Request) (res *Result, led bool, err error) {
	for {
		changed := i.leaseChanged() // before the attempt, so that a renewal right after it is not missed
		res, err := i.Sign(req)
		if !errors.Is(err, ErrNotLeading) {
			return res, true, err
		}
		if !i.leaseLapsed() {
			if i.Leading() {
				continue // etcd renewed the lease between the attempt and this check: sign now
			}
			return nil, false, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, true, fmt.Errorf("%w: etcd did not renew the leader's election lease in time", ErrNoLeader)
		}
	}
}

// ErrNotLeading is returned by Sign on a replica that does not lead (or lost its session a moment ago).
var ErrNotLeading = errors.New("this replica does not lead")

// Sign signs req with the Active CA on this replica through Policy.Sign, the one issuance policy, and
// tells OnIssued. It refuses, with ErrNotLeading, the moment leadership is lost or the election lease is
// no longer known to be alive, and it discards a signature finished after that moment (a process paused
// while signing): every certificate it returns was made while this replica certainly led.
func (i *Issuer) Sign(req Request) (*Result, error) {
	ca, bundle, ok := i.Signing()
	if !ok {
		return nil, ErrNotLeading
	}
	res, err := i.policy().Sign(ca, bundle, req, i.cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	if !i.leaseValid() {
		i.noteLeaseLapse()
		return nil, ErrNotLeading
	}
	if i.cfg.OnIssued != nil {
		i.cfg.OnIssued(req, res)
	}
	return res, nil
}

func (i *Issuer) policy() Policy {
	return Policy{ClusterDomain: i.cfg.ClusterDomain, MaxCertificateDuration: i.cfg.MaxCertificateDuration}
}

// Policy is certapi's one issuance policy. Every path signs through its Sign, so that none can drift
// from another: the servingcerts subresource (on the leader or through the handoff), Secret delivery,
// and the PodCertificateRequest signer.
type Policy struct {
	// ClusterDomain gives every certificate's second SAN.
	ClusterDomain string
	// MaxCertificateDuration, when positive, caps every lifetime: a Retiring CA stays trusted this long.
	MaxCertificateDuration time.Duration
}

// Sign signs req with ca at now: the key must be of a type certapi accepts (signer.CheckPublicKey), the
// lifetime is capped by MaxCertificateDuration and by req.MaxLifetime (which counts the backdate:
// signer.Backdate, or PCRBackdate on PathPCR), and the renewal time is signer.RenewalTime rounded up to
// a whole second, as the API and the Secret annotations carry it.
func (p Policy) Sign(ca *signer.CA, bundle []byte, req Request, now time.Time) (*Result, error) {
	pub := req.PublicKey
	if pub == nil {
		var err error
		if pub, err = x509.ParsePKIXPublicKey(req.PublicKeyPKIX); err != nil {
			return nil, fmt.Errorf("parsing the public key: %w", err)
		}
	}
	if err := signer.CheckPublicKey(pub); err != nil {
		return nil, err
	}
	if max := p.MaxCertificateDuration; max > 0 && req.Duration > max {
		req.Duration = max
	}
	backdate := signer.Backdate
	if req.Path == PathPCR {
		backdate = PCRBackdate
	}
	if req.MaxLifetime > 0 && req.Duration > req.MaxLifetime-backdate {
		req.Duration = req.MaxLifetime - backdate
	}
	leaf, err := ca.Sign(signer.LeafRequest{
		ServiceName:   req.ServiceName,
		Namespace:     req.Namespace,
		ClusterDomain: p.ClusterDomain,
		DNSNames:      req.DNSNames,
		PublicKey:     pub,
		Duration:      req.Duration,
		Backdate:      backdate,
		Now:           now,
	})
	if err != nil {
		return nil, fmt.Errorf("signing for %s/%s: %w", req.Namespace, req.Name, err)
	}
	var renewBefore *time.Duration
	if req.RenewBefore > 0 {
		renewBefore = &req.RenewBefore
	}
	return &Result{
		CertificatePEM: string(leaf.CertificatePEM),
		CABundle:       string(bundle),
		SerialNumber:   leaf.SerialNumber,
		NotBefore:      leaf.NotBefore,
		NotAfter:       leaf.NotAfter,
		RenewalTime:    ceilSecond(signer.RenewalTime(leaf.NotBefore, leaf.NotAfter, renewBefore, now)),
	}, nil
}

// ceilSecond rounds t up to a whole second: the API and Secret annotations carry whole seconds, and
// rounding up keeps a renewal time strictly after now, so the scheduled and the published time agree.
func ceilSecond(t time.Time) time.Time {
	r := t.Truncate(time.Second)
	if r.Before(t) {
		r = r.Add(time.Second)
	}
	return r
}

// Run takes part in the leader election until ctx ends. While leading it holds the CA in memory, answers
// handoffs and runs OnLeading. When ctx ends it resigns, so another replica takes over at once.
func (i *Issuer) Run(ctx context.Context) error {
	// Failed rounds (etcd unreachable, a leader whose loops could not start) are retried after 1 s,
	// doubling up to 30 s while they keep failing, so a broken leader does not spin.
	newBackoff := func() wait.Backoff {
		return wait.Backoff{Duration: time.Second, Factor: 2, Cap: 30 * time.Second, Steps: math.MaxInt32}
	}
	backoff := newBackoff()
	for ctx.Err() == nil {
		err := i.campaignOnce(ctx)
		if err == nil || ctx.Err() != nil {
			backoff = newBackoff()
			continue
		}
		delay := backoff.Step()
		klog.ErrorS(err, "Leader election round failed; retrying", "identity", i.cfg.Identity, "retryIn", delay)
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
	}
	return nil
}

func (i *Issuer) campaignOnce(ctx context.Context) error {
	ttl := int(i.cfg.SessionTTL.Round(time.Second) / time.Second)
	if ttl < 1 {
		ttl = 1
	}
	// The lease is granted here rather than by the session, to know when it was asked for: etcd starts its
	// TTL after that moment, so it cannot expire before then + TTL (see lease.go).
	sent := i.now()
	lease, err := i.cfg.Client.Grant(ctx, int64(ttl))
	if err != nil {
		return fmt.Errorf("granting the election lease: %w", err)
	}
	leaseTTL := time.Duration(lease.TTL) * time.Second
	i.leaseGranted(sent, leaseTTL)
	session, err := concurrency.NewSession(i.cfg.Client, concurrency.WithTTL(ttl), concurrency.WithLease(lease.ID), concurrency.WithContext(ctx))
	if err != nil {
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		_, _ = i.cfg.Client.Revoke(rctx, lease.ID)
		return fmt.Errorf("opening an etcd session: %w", err)
	}
	defer session.Close()
	election := concurrency.NewElection(session, i.cfg.Prefix+"/leader")
	klog.InfoS("Campaigning for leadership", "identity", i.cfg.Identity)
	if err := election.Campaign(ctx, i.cfg.Identity); err != nil {
		return fmt.Errorf("campaigning: %w", err)
	}
	klog.InfoS("Became leader", "identity", i.cfg.Identity, "key", election.Key())
	// The grant may be long past after a wait as a follower: renew now, so that the term starts with a
	// lease known to be alive.
	if err := i.renewLease(ctx, lease.ID, leaseTTL); err != nil {
		return err
	}

	leadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	// Renew the lease and time the renewals: signing stops when the lease is no longer known to be alive,
	// and the term ends when etcd says it is gone.
	wg.Go(func() { i.keepLease(leadCtx, lease.ID, leaseTTL, cancel) })
	// Stop signing the moment the session is gone, before anything else notices.
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-session.Done():
			i.setLeading(false, signer.Authorities{})
			klog.InfoS("Lost leadership: etcd session ended", "identity", i.cfg.Identity)
			cancel()
		case <-leadCtx.Done():
		}
	}()

	err = i.lead(leadCtx, election.Key(), election.Rev())
	i.setLeading(false, signer.Authorities{})
	cancel()
	wg.Wait()

	if ctx.Err() != nil || err != nil {
		// Shutting down, or this term failed: resign so a follower takes over now rather than after the
		// session TTL.
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		if rerr := election.Resign(rctx); rerr != nil {
			klog.ErrorS(rerr, "Resigning leadership failed; followers take over when the session expires", "identity", i.cfg.Identity)
		} else {
			klog.InfoS("Resigned leadership", "identity", i.cfg.Identity)
		}
	}
	return err
}

// lead loads or creates the CA, then serves until ctx ends.
func (i *Issuer) lead(ctx context.Context, leaderKey string, leaderRev int64) error {
	i.mu.Lock()
	i.termKey, i.termRev = leaderKey, leaderRev
	i.mu.Unlock()
	auth, modRev, err := i.loadOrCreateCA(ctx, leaderKey, leaderRev)
	if err != nil {
		return err
	}
	i.mu.Lock()
	i.modRev = modRev
	i.mu.Unlock()
	i.setLeading(true, auth)
	ca := auth.Active
	klog.InfoS("Leading: signing with the Active CA", "identity", i.cfg.Identity, "serialNumber", signer.FormatSerialNumber(ca.Certificate.SerialNumber), "notAfter", ca.Certificate.NotAfter)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var leadErr error
	if i.cfg.OnLeading != nil {
		wg.Go(func() {
			if err := i.cfg.OnLeading(ctx); err != nil && ctx.Err() == nil {
				leadErr = fmt.Errorf("the leader's loops failed; giving up this term: %w", err)
				cancel()
			}
		})
	}
	err = i.serveHandoffs(ctx)
	cancel()
	wg.Wait()
	if leadErr != nil {
		return leadErr
	}
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (i *Issuer) loadOrCreateCA(ctx context.Context, leaderKey string, leaderRev int64) (signer.Authorities, int64, error) {
	for attempt := 0; attempt < 3; attempt++ {
		l, err := i.store.load(ctx)
		auth, rev := l.auth, l.modRevision
		if err != nil {
			return auth, 0, err
		}
		if l.found && l.rewrite != "" {
			// Rewritten as it is now, fenced like every CA write: encrypted with the configured key, and
			// without the key of any CA that no longer signs.
			newRev, err := i.store.save(ctx, auth, rev, leaderKey, leaderRev)
			if errors.Is(err, ErrFenced) {
				if !i.stillLeader(ctx, leaderKey, leaderRev) {
					return auth, 0, err
				}
				continue // the record changed meanwhile: read it again
			}
			if err != nil {
				return auth, 0, fmt.Errorf("rewriting the CA record: %w", err)
			}
			klog.InfoS("Rewrote the CA record", "reason", l.rewrite)
			rev = newRev
		}
		if l.found {
			klog.InfoS("Loaded the CA from etcd", "serialNumber", signer.FormatSerialNumber(auth.Active.Certificate.SerialNumber), "bundleSize", len(auth.Certificates()))
			return auth, rev, nil
		}
		ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: i.cfg.ClusterDomain, Duration: i.cfg.CADuration, Now: i.cfg.Clock.Now()})
		if err != nil {
			return auth, 0, fmt.Errorf("generating the CA: %w", err)
		}
		auth = signer.Authorities{Active: ca}
		newRev, err := i.store.save(ctx, auth, 0, leaderKey, leaderRev)
		if err == nil {
			klog.InfoS("Created the cluster's CA", "serialNumber", signer.FormatSerialNumber(ca.Certificate.SerialNumber), "notAfter", ca.Certificate.NotAfter)
			return auth, newRev, nil
		}
		if !errors.Is(err, ErrFenced) {
			return auth, 0, err
		}
		// Either we no longer lead (the next load happens in a new term) or the record appeared: look again.
		if !i.stillLeader(ctx, leaderKey, leaderRev) {
			return auth, 0, err
		}
	}
	return signer.Authorities{}, 0, errors.New("the CA record kept changing while creating the CA")
}

func (i *Issuer) stillLeader(ctx context.Context, leaderKey string, leaderRev int64) bool {
	resp, err := i.cfg.Client.Get(ctx, leaderKey)
	return err == nil && len(resp.Kvs) == 1 && resp.Kvs[0].CreateRevision == leaderRev
}

func (i *Issuer) setLeading(leading bool, auth signer.Authorities) {
	i.mu.Lock()
	changed := i.leading != leading
	i.leading, i.auth, i.bundle = leading, auth, nil
	if changed {
		i.published.next = nil
	}
	if leading {
		i.bundle = auth.Bundle()
	}
	i.mu.Unlock()
	if changed {
		i.signalLease()
	}
	if changed && i.cfg.OnLeadershipChange != nil {
		i.cfg.OnLeadershipChange(leading)
	}
	if changed || leading {
		i.listeners.notify()
	}
}

// identityTransformer stores values as they are, when no encryption is configured.
type identityTransformer struct{}

func (identityTransformer) TransformFromStorage(_ context.Context, data []byte, _ value.Context) ([]byte, bool, error) {
	return data, false, nil
}

func (identityTransformer) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	return data, nil
}
