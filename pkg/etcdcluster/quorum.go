package etcdcluster

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// NoLeaderGrace is how long a member must know no raft leader before it holds its cluster to have lost
// its quorum (Member.QuorumLost). An election in a cluster that has its quorum leaves a member without a
// leader for milliseconds (a leadership transfer) up to about the election timeout (etcd's 1 s,
// randomized up to 2 s, when a pre-vote round is split); a lost quorum lasts until a member comes back,
// seconds at the least. Until then calls wait on etcd as they always did.
const NoLeaderGrace = 3 * time.Second

// leaderPollInterval is how often the member reads whether its etcd server knows a leader: an atomic
// load inside etcd (EtcdServer.Leader), so polling costs nothing measurable. etcd announces a new leader
// (LeaderChangedNotify) but not the loss of one.
const leaderPollInterval = 100 * time.Millisecond

// QuorumState is what a member knows of its cluster's quorum.
type QuorumState struct {
	// Lost is true once the member has known no leader for NoLeaderGrace.
	Lost bool
	// NoLeaderSince is when the member last lost its leader; zero while it knows one.
	NoLeaderSince time.Time
	// Voters counts the voting members of the member list as this member applied it.
	Voters int
	// Reached counts the voting members, this one included, that answered this member's latest check
	// while the quorum was lost; 0 until that check.
	Reached int
}

// QuorumLost reports whether this member has known no raft leader for NoLeaderGrace: one atomic load,
// cheap enough for every request.
func (m *Member) QuorumLost() bool { return m.quorumLost.Load() }

// QuorumLostContext returns a context that ends when this member next holds its cluster's quorum lost
// (at once while it is lost): a caller ties a call in flight to it, so that the call ends when the quorum
// does rather than wait on etcd.
func (m *Member) QuorumLostContext() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lostContextLocked()
}

// lostContextLocked returns the context QuorumLostContext gives, making it when there is none; m.mu is held.
func (m *Member) lostContextLocked() context.Context {
	if m.lostCtx == nil {
		m.lostCtx, m.lostCancel = context.WithCancel(context.Background())
		if m.quorum.Lost {
			m.lostCancel()
		}
	}
	return m.lostCtx
}

// QuorumState returns what this member knows of its cluster's quorum.
func (m *Member) QuorumState() QuorumState {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.quorum
}

// watchLeader reads every leaderPollInterval whether the etcd server knows a leader, until ctx ends, and
// sends on lost when the quorum has just been lost (the maintenance loop then checks which members it
// reaches).
func (m *Member) watchLeader(ctx context.Context, lost chan<- struct{}) {
	t := time.NewTicker(leaderPollInterval)
	defer t.Stop()
	for {
		hasLeader, voters := m.etcd.Server.Leader() != 0, -1
		if !hasLeader {
			voters = m.voters()
		}
		if m.observeLeader(time.Now(), hasLeader, voters) {
			select {
			case lost <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// voters counts the voting members of the member list as this member applied it.
func (m *Member) voters() int {
	n := 0
	for _, mm := range m.etcd.Server.Cluster().Members() {
		if !mm.IsLearner {
			n++
		}
	}
	return n
}

// observeLeader records whether the member knows a leader at now, with the voting members it knows (-1:
// not counted, as they are not while it knows a leader); it reports whether the quorum has just been lost.
func (m *Member) observeLeader(now time.Time, hasLeader bool, voters int) (justLost bool) {
	m.mu.Lock()
	q := &m.quorum
	switch {
	case hasLeader:
		q.NoLeaderSince, q.Reached = time.Time{}, 0
	case q.NoLeaderSince.IsZero():
		q.NoLeaderSince = now
	}
	if voters >= 0 {
		q.Voters = voters
	}
	lost := !hasLeader && now.Sub(q.NoLeaderSince) >= NoLeaderGrace
	changed := q.Lost != lost
	q.Lost = lost
	if changed {
		// The calls tied to the current context end now; those made from here on get a new one.
		m.lostContextLocked()
		if lost {
			m.lostCancel()
		} else {
			m.lostCtx, m.lostCancel = nil, nil
		}
	}
	m.quorumLost.Store(lost)
	since, voters := q.NoLeaderSince, q.Voters
	m.mu.Unlock()
	if !changed {
		return false
	}
	if lost {
		klog.InfoS("The etcd cluster has lost its quorum: this member has known no leader since; certapi answers its API 503 with Retry-After until a leader is back",
			"member", m.cfg.Name, "since", since, "voters", voters, "quorum", Quorum(voters))
	} else {
		klog.InfoS("The etcd cluster has its quorum again: this member knows a leader", "member", m.cfg.Name)
	}
	return lost
}

// checkReach asks every other voting member for its status and records how many answered (a member
// without a leader answers too), with this one, while the quorum is lost.
func (m *Member) checkReach(ctx context.Context, members []Entry) {
	c, err := m.client(ctx, []string{m.localClientURL()})
	if err != nil {
		return
	}
	defer func() { _ = c.Close() }()
	answers := askStatus(ctx, c, members, m.ID())
	reached := 1
	for _, mm := range members {
		if a, ok := answers[mm.ID]; ok && a.answered && !mm.IsLearner {
			reached++
		}
	}
	m.mu.Lock()
	if m.quorum.Lost {
		m.quorum.Reached = reached
	}
	m.mu.Unlock()
}

// statusAnswer is how a member answered a Status call.
type statusAnswer struct {
	// answered: it answered at all; healthy: it answered without errors (with a leader, no alarm).
	answered, healthy bool
}

// askStatus asks every member but self that has a client URL for its status, all at once, 2 s each.
func askStatus(ctx context.Context, c *clientv3.Client, members []Entry, self uint64) map[uint64]statusAnswer {
	out := map[uint64]statusAnswer{}
	type answer struct {
		id uint64
		a  statusAnswer
	}
	ch := make(chan answer)
	n := 0
	for _, mm := range members {
		if mm.ID == self || len(mm.ClientURLs) == 0 {
			continue
		}
		n++
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			resp, err := c.Status(cctx, mm.ClientURLs[0])
			ch <- answer{mm.ID, statusAnswer{answered: err == nil, healthy: err == nil && len(resp.Errors) == 0}}
		}()
	}
	for range n {
		a := <-ch
		out[a.id] = a.a
	}
	return out
}
