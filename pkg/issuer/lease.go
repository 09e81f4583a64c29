package issuer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/signer"
)

// A leader signs only while its election lease is known to be alive on its own CLOCK_BOOTTIME (bootTime),
// not merely while the etcd client still believes in its session: a process paused for longer than the
// TTL (a GC stall, SIGSTOP, a frozen or suspended VM) resumes with its session intact in memory, and
// could otherwise sign for a moment after another replica has taken over. CLOCK_BOOTTIME keeps counting
// while the machine is suspended or the VM paused, where Go's monotonic clock (CLOCK_MONOTONIC) stops and
// would make the lease look younger than it is.
//
// etcd starts a lease's TTL afresh when it grants or renews it, and only ever extends it (a new etcd
// leader extends every lease), so a lease renewed by a keepalive sent at local time t cannot expire
// before t + TTL. The leader sends its own keepalives (KeepAliveOnce, one stream per call, so no answer
// can be a stale one read late) and records the time each was sent; it signs only before the last one
// plus the TTL minus signingMargin, and checks again after each signature, so no certificate made after
// that point ever leaves the process.

// signingMargin is taken off the lease's TTL before the end of the time a leader may sign. It covers
// the rate difference between this host's clock and the etcd leader's and the moments between the
// check after a signature and the process noticing anything: a tenth of the TTL, at least 500ms, and
// never more than half the TTL.
func signingMargin(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 500*time.Millisecond), ttl/2)
}

// leaseKnownValid reports whether a lease of ttl, last granted or renewed by a request sent at
// renewedAt, is certainly still alive at now, with margin to spare. All three times are readings of the
// local CLOCK_BOOTTIME (bootTime); a zero renewedAt (no lease yet) is never valid.
func leaseKnownValid(now, renewedAt time.Time, ttl, margin time.Duration) bool {
	if renewedAt.IsZero() || ttl <= 0 {
		return false
	}
	return now.Before(renewedAt.Add(ttl - margin))
}

// renewalInterval is how often the leader renews its lease itself: four times per TTL, so that a few
// keepalives may be lost or slow before the lease stops being known valid.
func renewalInterval(ttl time.Duration) time.Duration {
	return max(ttl/4, 100*time.Millisecond)
}

// leaseGranted records a new election lease, granted by a request sent at sent.
func (i *Issuer) leaseGranted(sent time.Time, ttl time.Duration) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.leaseRenewedAt, i.leaseTTL = sent, ttl
	i.leaseLapseLogged.Store(false)
}

// leaseRenewed records a keepalive sent at sent that etcd answered with ttl. A renewal after the lease
// had stopped being known valid proves that it never expired (etcd cannot revive a lease), so signing
// resumes: listeners are told, and the log says so.
func (i *Issuer) leaseRenewed(ctx context.Context, sent time.Time, ttl time.Duration) {
	i.mu.Lock()
	wasValid := i.leaseValidLocked()
	if sent.After(i.leaseRenewedAt) {
		i.leaseRenewedAt, i.leaseTTL = sent, ttl
	}
	leading := i.leading
	i.mu.Unlock()
	if !wasValid && leading {
		i.leaseLapseLogged.Store(false)
		klog.FromContext(ctx).Info("Signing again: etcd renewed the election lease, so it never expired", "identity", i.cfg.Identity)
		i.signalLease()
		i.listeners.Notify()
	}
}

// leaseLapsed reports whether this replica leads but its election lease is not known to be alive now.
func (i *Issuer) leaseLapsed() bool {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.leading && i.auth.Active != nil && !i.leaseValidLocked()
}

// leaseChanged returns a channel that is closed the next time the lease becomes known valid again or
// this replica stops leading.
func (i *Issuer) leaseChanged() <-chan struct{} {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.leaseCh == nil {
		i.leaseCh = make(chan struct{})
	}
	return i.leaseCh
}

// signalLease wakes the calls waiting in leaseChanged.
func (i *Issuer) signalLease() {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.leaseCh != nil {
		close(i.leaseCh)
		i.leaseCh = nil
	}
}

// leaseValidLocked reports whether the election lease is known valid now; the caller holds i.mu.
func (i *Issuer) leaseValidLocked() bool {
	return leaseKnownValid(i.now(), i.leaseRenewedAt, i.leaseTTL, signingMargin(i.leaseTTL))
}

// leaseValid reports whether the election lease is known valid now.
func (i *Issuer) leaseValid() bool {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return i.leaseValidLocked()
}

// noteLeaseLapse logs, once per lapse, that a leader refuses to sign because its lease may have expired.
func (i *Issuer) noteLeaseLapse() {
	if i.leaseLapseLogged.CompareAndSwap(false, true) {
		i.mu.RLock()
		since := i.now().Sub(i.leaseRenewedAt)
		ttl := i.leaseTTL
		i.mu.RUnlock()
		i.log().Info("Not signing: the election lease may have expired (no keepalive answered in time); waiting for etcd to renew it or for the session to end",
			"identity", i.cfg.Identity, "sinceLastRenewal", since.Round(time.Millisecond), "ttl", ttl)
	}
}

// renewLease sends one keepalive of the election lease, waiting at most its TTL, and records when it was
// sent. rpctypes.ErrLeaseNotFound means the lease is gone.
func (i *Issuer) renewLease(ctx context.Context, id clientv3.LeaseID, ttl time.Duration) error {
	sent := i.now()
	kctx, cancel := context.WithTimeout(ctx, ttl)
	defer cancel()
	resp, err := i.cfg.Client.KeepAliveOnce(kctx, id)
	if err != nil {
		return fmt.Errorf("renewing the election lease: %w", err)
	}
	i.leaseRenewed(ctx, sent, time.Duration(resp.TTL)*time.Second)
	return nil
}

// keepLease renews the election lease every renewalInterval until ctx ends (see renewLease). When etcd
// answers that the lease is gone, this replica stops signing at once and lost is called, which ends the
// term. Other errors are retried: the lease simply stops being known valid when they last too long.
func (i *Issuer) keepLease(ctx context.Context, id clientv3.LeaseID, ttl time.Duration, lost func()) {
	interval := renewalInterval(ttl)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := i.now()
		err := i.renewLease(ctx, id, ttl)
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			i.setLeading(false, signer.Authorities{})
			klog.FromContext(ctx).Info("Lost leadership: etcd says the election lease has expired", "identity", i.cfg.Identity)
			lost()
			return
		case err != nil:
			klog.FromContext(ctx).V(2).Info("Renewing the election lease failed; retrying", "identity", i.cfg.Identity, "err", err)
		}
		t.Reset(max(interval-i.now().Sub(start), 0))
	}
}
