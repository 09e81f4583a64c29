package etcdcluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/controller"
)

// maintenance is the maintenance loop's memory from one round to the next. The maintainer's queue runs
// one round at a time, so it needs no lock.
type maintenance struct {
	// tracker remembers since when each member has been unhealthy (on the etcd leader).
	tracker HealthTracker
	// lastReason and lastPeerReason are the membership's and the peer CA's latest reasons, logged when
	// they change.
	lastReason, lastPeerReason string
	// custodyDone is true once this member has done its part of the key's custody (custody.go).
	custodyDone bool
}

// maintainerKey is the one key of the member's maintenance queue: the member itself.
type maintainerKey struct{}

// newMaintainer makes the queue Run's maintenance rounds run on (the project's queue, one key): a round
// every CheckInterval, and one at once when something calls for it (wakeMaintainer: a peer CA to
// re-issue from, a quorum just lost). loop is the rounds' memory; the queue never runs two at once.
func (m *Member) newMaintainer() *controller.Queue[maintainerKey] {
	var loop maintenance
	return controller.NewQueue(controller.QueueOptions[maintainerKey]{
		Name: "etcd-member-maintainer",
		Sync: func(ctx context.Context, _ maintainerKey) (controller.Result, error) {
			m.maintainRound(ctx, &loop)
			return controller.Result{After: m.cfg.CheckInterval}, nil
		},
	})
}

// wakeMaintainer asks for a maintenance round at once; a round already asked for is not asked twice.
func (m *Member) wakeMaintainer() {
	if m.maintainer != nil {
		m.maintainer.Add(maintainerKey{})
	}
}

// Run keeps the member until ctx ends: it renews the member certificate, and on the etcd leader it
// checks every member's health and removes one that stayed dead past the timeout when
// DecideMaintenance allows. It returns when ctx ends (nil) or etcd stops (why). It logs through ctx's
// logger, named etcd-member, with this member's name.
func (m *Member) Run(ctx context.Context) error {
	ctx = klog.NewContext(ctx, memberLogger(ctx, m.cfg.Name))
	runCtx, stop := context.WithCancelCause(ctx)
	// The leader watch, the enrollment server and the watch on etcd are Run's own: they end with it.
	var own sync.WaitGroup
	defer own.Wait()
	defer stop(nil)
	own.Go(func() {
		select {
		case <-runCtx.Done():
		case err := <-m.etcd.Err():
			stop(fmt.Errorf("etcd member %s: %w", m.cfg.Name, err))
		case <-m.etcd.Server.StopNotify():
			stop(fmt.Errorf("etcd member %s stopped", m.cfg.Name))
		}
	})
	// A quorum just lost: check at once which members this one still reaches, for the 503s' message.
	own.Go(func() { m.watchLeader(runCtx, m.wakeMaintainer) })
	if m.cfg.Verifier != nil {
		own.Go(func() {
			if err := m.serveEnrollment(runCtx); err != nil {
				klog.FromContext(runCtx).Error(err, "This etcd member cannot enroll joining members; they enroll through another")
			}
		})
	}
	m.wakeMaintainer() // the first round at once
	if err := m.maintainer.Run(runCtx); err != nil {
		return fmt.Errorf("etcd member %s: %w", m.cfg.Name, err)
	}
	if ctx.Err() != nil {
		return nil
	}
	return context.Cause(runCtx)
}

// maintainRound is one round of the maintenance loop: the key's custody, the member certificate's
// renewal (when due, or at once after SetPeerCA brought another CA), then maintain.
func (m *Member) maintainRound(ctx context.Context, loop *maintenance) {
	logger := klog.FromContext(ctx)
	renewAt := m.creds.cert.Load().RenewAt
	m.keepCustody(ctx, &loop.custodyDone)
	if reissue := m.creds.reissue.Swap(false); reissue || !time.Now().Before(renewAt) {
		if err := m.renewCertificate(ctx, time.Now()); err != nil {
			if reissue {
				m.creds.reissue.Store(true) // the next round tries again
			}
			logger.Error(err, "Renewing the etcd member certificate failed; retried")
		} else {
			logger.Info("Renewed the etcd member certificate", "peerCA", m.PeerCA().CA.Certificate.SerialNumber.Text(16))
		}
	}
	m.maintain(ctx, loop)
}

// maintain runs one round of the maintenance loop, through the member's long-lived client of itself
// (etcdClients.localClient): the same client every round.
func (m *Member) maintain(ctx context.Context, loop *maintenance) {
	self := m.ID()
	members := convertClusterMembers(m.etcd.Server)
	peer := m.PeerCA()
	st := Status{Leader: uint64(m.etcd.Server.Leader()) == self, CheckedAt: time.Now(), PeerCA: PeerCAStatus{
		SerialNumber: peer.CA.Certificate.SerialNumber.Text(16), NotAfter: peer.CA.Certificate.NotAfter, Rotating: peer.CA.Rotating(),
	}}
	for _, mm := range members {
		if mm.IsLearner {
			st.Learners++
		} else {
			st.Members++
		}
	}
	if !st.Leader {
		loop.tracker = HealthTracker{}
		m.status.set(st)
		if m.QuorumLost() {
			if c, err := m.clients.localClient(); err == nil {
				m.checkReach(ctx, c, members)
			}
		}
		return
	}
	c, err := m.clients.localClient()
	if err != nil {
		m.status.set(st)
		return
	}
	healthy := map[uint64]bool{self: true}
	for id, a := range askStatus(ctx, c, members, self) {
		healthy[id] = a.healthy
	}
	states := loop.tracker.Observe(time.Now(), members, healthy)
	// Only an unhealthy member can be removed: ask for the StatefulSet's size (an API call) only then, so
	// that a healthy cluster costs kube-apiserver nothing.
	anyUnhealthy := slices.ContainsFunc(states, func(s MemberState) bool { return !s.Healthy })
	if m.cfg.DesiredMembers != nil && anyUnhealthy {
		if n, ok := m.cfg.DesiredMembers(ctx); ok {
			for i := range states {
				if o := Ordinal(states[i].Name); o >= 0 && o >= n {
					states[i].Departed = true
				}
			}
		}
	}
	st.Healthy = map[string]bool{}
	for _, s := range states {
		name := s.Name
		if name == "" {
			name = fmt.Sprintf("%x", s.ID)
		}
		st.Healthy[name] = s.Healthy
	}
	act := DecideMaintenance(MaintenanceInput{Members: states, Now: time.Now(), DeadMemberTimeout: m.cfg.DeadMemberTimeout, StalledLearnerTimeout: m.cfg.StalledLearnerTimeout})
	st.Decision = act.Reason
	m.rotatePeerCA(ctx, c, peer, members, &st.PeerCA, &loop.lastPeerReason)
	m.status.set(st)
	if act.Reason != "" && act.Reason != loop.lastReason {
		klog.FromContext(ctx).Info("Etcd membership", "reason", act.Reason)
	}
	loop.lastReason = act.Reason
	if !act.Remove {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// "member" names the dead member in these two lines: it takes the place of this member's name that
	// the logger carries (klog keeps the last value of a key).
	if _, err := c.MemberRemove(cctx, act.ID); err != nil {
		klog.FromContext(ctx).Error(err, "Removing a dead etcd member failed", "member", act.Name, "id", fmt.Sprintf("%x", act.ID), "peerURLs", peerURLs(states, act.ID))
		return
	}
	// An unstarted learner has no name yet: its peer URL says whose it was.
	klog.FromContext(ctx).Info("Removed a dead etcd member", "member", act.Name, "id", fmt.Sprintf("%x", act.ID), "peerURLs", peerURLs(states, act.ID))
}

// peerURLs are the peer URLs of member id in states.
func peerURLs(states []MemberState, id uint64) []string {
	for _, s := range states {
		if s.ID == id {
			return s.PeerURLs
		}
	}
	return nil
}
