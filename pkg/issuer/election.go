package issuer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/signer"
)

// Run takes part in the leader election until ctx ends. While leading it holds the CA in memory, answers
// handoffs and runs OnLeading. When ctx ends it resigns, so another replica takes over at once.
func (i *Issuer) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("issuer")
	i.logger.Store(&logger)
	ctx = klog.NewContext(ctx, logger)
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
		logger.Error(err, "Leader election round failed; retrying", "identity", i.cfg.Identity, "retryIn", delay)
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
	klog.FromContext(ctx).Info("Campaigning for leadership", "identity", i.cfg.Identity)
	if err := election.Campaign(ctx, i.cfg.Identity); err != nil {
		return fmt.Errorf("campaigning: %w", err)
	}
	// The grant may be long past after a wait as a follower: renew now, so that the term starts with a
	// lease known to be alive. Campaign returns once no older key is left, even when this one went with
	// its lease meanwhile: only a renewal says the election was won.
	if err := i.renewLease(ctx, lease.ID, leaseTTL); err != nil {
		return fmt.Errorf("the campaign ended, but the term cannot start: %w", err)
	}
	klog.FromContext(ctx).Info("Became leader", "identity", i.cfg.Identity, "key", election.Key())

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
			klog.FromContext(ctx).Info("Lost leadership: etcd session ended", "identity", i.cfg.Identity)
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
			klog.FromContext(ctx).Error(rerr, "Resigning leadership failed; followers take over when the session expires", "identity", i.cfg.Identity)
		} else {
			klog.FromContext(ctx).Info("Resigned leadership", "identity", i.cfg.Identity)
		}
	}
	return err
}

// lead loads or creates the CA, then serves until ctx ends.
func (i *Issuer) lead(ctx context.Context, leaderKey string, leaderRev int64) error {
	i.mu.Lock()
	i.termKey, i.termRev = leaderKey, leaderRev
	i.mu.Unlock()
	l, created, err := i.loadOrCreateCA(ctx, leaderKey, leaderRev)
	if err != nil {
		return err
	}
	auth := l.auth
	i.mu.Lock()
	i.modRev = l.modRevision
	i.recovery, i.recoveredThisTerm = l.recovery, created && l.recovery != nil
	i.mu.Unlock()
	i.setLeading(true, auth)
	ca := auth.Active
	klog.FromContext(ctx).Info("Leading: signing with the Active CA", "identity", i.cfg.Identity, "serialNumber", signer.FormatSerialNumber(ca.Certificate.SerialNumber), "notAfter", ca.Certificate.NotAfter)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var leadErr error
	// Beside the term's work, not before it: a token that is slow to list its keys delays nothing.
	wg.Go(func() { i.sweepOrphanKeys(ctx, auth) })
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

// loadOrCreateCA returns the stored CA record, rewritten first when it must be, or creates one when none
// is stored (created is then true): a new Active CA, and the CAs of certapi's found in what it had
// published as Retiring (newAuthorities).
func (i *Issuer) loadOrCreateCA(ctx context.Context, leaderKey string, leaderRev int64) (l loaded, created bool, err error) {
	for attempt := 0; attempt < 3; attempt++ {
		l, err = i.store.load(ctx)
		if err != nil {
			return l, false, err
		}
		if l.found && l.rewrite != "" {
			// Rewritten as it is now, fenced like every CA write: encrypted with the configured key, and
			// without the key of any CA that no longer signs.
			newRev, err := i.store.save(ctx, l.auth, l.recovery, l.modRevision, leaderKey, leaderRev)
			if errors.Is(err, ErrFenced) {
				if !i.stillLeader(ctx, leaderKey, leaderRev) {
					return l, false, err
				}
				continue // the record changed meanwhile: read it again
			}
			if err != nil {
				return l, false, fmt.Errorf("rewriting the CA record: %w", err)
			}
			klog.FromContext(ctx).Info("Rewrote the CA record", "reason", l.rewrite)
			l.modRevision = newRev
		}
		if l.found {
			klog.FromContext(ctx).Info("Loaded the CA from etcd", "serialNumber", signer.FormatSerialNumber(l.auth.Active.Certificate.SerialNumber), "bundleSize", len(l.auth.Certificates()))
			return l, false, nil
		}
		auth, rec, err := i.newAuthorities(ctx)
		if err != nil {
			return l, false, err
		}
		newRev, err := i.store.save(ctx, auth, rec, 0, leaderKey, leaderRev)
		if err == nil {
			ca := auth.Active
			klog.FromContext(ctx).Info("Created the cluster's CA", "serialNumber", signer.FormatSerialNumber(ca.Certificate.SerialNumber), "notAfter", ca.Certificate.NotAfter,
				"keptRetiring", len(auth.Retiring))
			return loaded{auth: auth, modRevision: newRev, found: true, recovery: rec}, true, nil
		}
		if !errors.Is(err, ErrFenced) {
			return l, false, err
		}
		// The fenced write stored nothing: the new CA's key in the HSM is no record's and never will be.
		// Destroyed now, whether this replica still leads or not (the sweep of a later term would take an
		// hour), so that a term that ends between the key and the record leaves none behind.
		i.destroyDropped(context.WithoutCancel(ctx), auth, signer.Authorities{})
		// Either we no longer lead (the next load happens in a new term) or the record appeared: look again.
		if !i.stillLeader(ctx, leaderKey, leaderRev) {
			return l, false, err
		}
	}
	return loaded{}, false, errors.New("the CA record kept changing while creating the CA")
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
		i.bundle = auth.BundleFor(i.cfg.BundleAnchor)
	}
	i.mu.Unlock()
	if changed {
		i.signalLease()
	}
	if changed && i.cfg.OnLeadershipChange != nil {
		i.cfg.OnLeadershipChange(leading)
	}
	if changed || leading {
		i.listeners.Notify()
	}
}
