package issuer

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/signer"
)

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
	i.writeMu.Lock()
	defer i.writeMu.Unlock()
	i.mu.RLock()
	leading, stored, recovery, modRev, key, rev := i.leading, i.auth, i.recovery, i.modRev, i.termKey, i.termRev
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
			key, err := i.newCAKey(ctx, now)
			if err != nil {
				return nil, err
			}
			return signer.NewCA(signer.CAOptions{ClusterDomain: i.cfg.ClusterDomain, Duration: req.CADuration, Now: now, Key: key})
		},
		Upstream:   i.cfg.Upstream != nil,
		NewRequest: func(reason signer.PendingReason) (*signer.PendingCA, error) { return i.newRequest(ctx, reason, now) },
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
	newRev, err := i.store.save(ctx, next, recovery, modRev, key, rev)
	if err != nil {
		return nil, fmt.Errorf("persisting rotation step %s: %w", step, err)
	}
	i.adopt(ctx, stored, next, newRev, key, step == signer.StepPublishNext)
	klog.FromContext(ctx).Info("CA rotation step", "step", step, "active", signer.FormatSerialNumber(next.Active.Certificate.SerialNumber), "bundleSize", len(next.Certificates()))
	return []signer.RotationStep{step}, nil
}

// adopt makes next, stored at newRev in the term key, the CAs this replica signs with (while that term
// lasts), tells the listeners, and only then destroys in the HSM the keys of the CAs of stored that next
// no longer holds: a signature begun with a CA that next dropped, failing for its destroyed key, is made
// again with next's Active CA (Sign). publishedNext records that this term published next's Next CA now.
func (i *Issuer) adopt(ctx context.Context, stored, next signer.Authorities, newRev int64, key string, publishedNext bool) {
	i.mu.Lock()
	if i.leading && i.termKey == key {
		i.auth, i.bundle, i.modRev = next, next.BundleFor(i.cfg.BundleAnchor), newRev
		if publishedNext {
			i.published.next, i.published.at = next.Next.Certificate, i.now()
		}
	}
	i.mu.Unlock()
	i.listeners.Notify()
	i.destroyDropped(ctx, stored, next)
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
