package etcdcluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// maintenance is the maintenance loop's memory from one round to the next. Run's goroutine alone uses
// it, so it needs no lock.
type maintenance struct {
	// tracker remembers since when each member has been unhealthy (on the etcd leader).
	tracker HealthTracker
	// lastReason and lastPeerReason are the membership's and the peer CA's latest reasons, logged when
	// they change.
	lastReason, lastPeerReason string
	// custodyDone is true once this member has done its part of the key's custody (custody.go).
	custodyDone bool
}

// Run keeps the member until ctx ends: it renews the member certificate, and on the etcd leader it
// checks every member's health and removes one that stayed dead past the timeout when
// DecideMaintenance allows. It returns when ctx ends or etcd stops.
func (m *Member) Run(ctx context.Context) error {
	var loop maintenance
	ticker := time.NewTicker(m.cfg.CheckInterval)
	defer ticker.Stop()
	// The leader watch is Run's own: it ends with Run.
	quorumLost := make(chan struct{}, 1)
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watch sync.WaitGroup
	defer func() {
		stopWatch()
		watch.Wait()
	}()
	watch.Go(func() { m.watchLeader(watchCtx, quorumLost) })
	if m.cfg.Verifier != nil {
		watch.Go(func() {
			if err := m.serveEnrollment(watchCtx); err != nil {
				klog.ErrorS(err, "This etcd member cannot enroll joining members; they enroll through another", "member", m.cfg.Name)
			}
		})
	}
	reissue := false
	for {
		renewAt := m.creds.cert.Load().RenewAt
		m.keepCustody(ctx, &loop.custodyDone)
		if reissue || !time.Now().Before(renewAt) {
			if err := m.renewCertificate(ctx, time.Now()); err != nil {
				klog.ErrorS(err, "Renewing the etcd member certificate failed; retried", "member", m.cfg.Name)
			} else {
				klog.InfoS("Renewed the etcd member certificate", "member", m.cfg.Name, "peerCA", m.PeerCA().CA.Certificate.SerialNumber.Text(16))
				reissue = false
			}
		}
		m.maintain(ctx, &loop)
		select {
		case <-ctx.Done():
			return nil
		case err := <-m.etcd.Err():
			return fmt.Errorf("etcd member %s: %w", m.cfg.Name, err)
		case <-m.etcd.Server.StopNotify():
			return fmt.Errorf("etcd member %s stopped", m.cfg.Name)
		case <-m.creds.changed:
			reissue = true
		case <-quorumLost:
			// Check at once which members this one still reaches, for the 503s' message.
		case <-ticker.C:
		}
	}
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
		klog.InfoS("Etcd membership", "reason", act.Reason)
	}
	loop.lastReason = act.Reason
	if !act.Remove {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.MemberRemove(cctx, act.ID); err != nil {
		klog.ErrorS(err, "Removing a dead etcd member failed", "member", act.Name, "id", fmt.Sprintf("%x", act.ID), "peerURLs", peerURLs(states, act.ID))
		return
	}
	// An unstarted learner has no name yet: its peer URL says whose it was.
	klog.InfoS("Removed a dead etcd member", "member", act.Name, "id", fmt.Sprintf("%x", act.ID), "peerURLs", peerURLs(states, act.ID))
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
