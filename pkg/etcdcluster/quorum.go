package etcdcluster

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
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

// quorumObserver is what a member knows of its cluster's quorum. It has its own lock, apart from the
// rest of the member: the leader watch writes it every leaderPollInterval, the maintenance loop's reach
// check writes Reached, and every request reads lost (an atomic) without taking the lock.
type quorumObserver struct {
	mu    sync.Mutex
	state QuorumState
	// lostCtx ends when the quorum is held lost (see QuorumLostContext); nil until asked for.
	lostCtx    context.Context
	lostCancel context.CancelFunc

	// lost is state.Lost, for readers on every request.
	lost atomic.Bool
}

// QuorumLost reports whether this member has known no raft leader for NoLeaderGrace: one atomic load,
// cheap enough for every request.
func (m *Member) QuorumLost() bool { return m.quorum.lost.Load() }

// QuorumLostContext returns a context that ends when this member next holds its cluster's quorum lost
// (at once while it is lost): a caller ties a call in flight to it, so that the call ends when the quorum
// does rather than wait on etcd.
func (m *Member) QuorumLostContext() context.Context { return m.quorum.context() }

// QuorumState returns what this member knows of its cluster's quorum.
func (m *Member) QuorumState() QuorumState { return m.quorum.get() }

// get returns the quorum's state.
func (q *quorumObserver) get() QuorumState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// context returns the context QuorumLostContext gives.
func (q *quorumObserver) context() context.Context {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.contextLocked()
}

// contextLocked returns the context QuorumLostContext gives, making it when there is none; q.mu is held.
func (q *quorumObserver) contextLocked() context.Context {
	if q.lostCtx == nil {
		q.lostCtx, q.lostCancel = context.WithCancel(context.Background())
		if q.state.Lost {
			q.lostCancel()
		}
	}
	return q.lostCtx
}

// watchLeader reads every leaderPollInterval whether the etcd server knows a leader, until ctx ends, and
// calls lost when the quorum has just been lost (Run wakes the maintainer, which then checks which
// members it reaches).
func (m *Member) watchLeader(ctx context.Context, lost func()) {
	logger := klog.FromContext(ctx)
	wait.UntilWithContext(ctx, func(context.Context) {
		hasLeader, voters := m.etcd.Server.Leader() != 0, -1
		if !hasLeader {
			voters = m.voters()
		}
		if m.quorum.observe(logger, time.Now(), hasLeader, voters) {
			lost()
		}
	}, leaderPollInterval)
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

// observe records whether the member knows a leader at now, with the voting members it knows (-1: not
// counted, as they are not while it knows a leader); it reports whether the quorum has just been lost,
// and logs each change to logger.
func (q *quorumObserver) observe(logger klog.Logger, now time.Time, hasLeader bool, voters int) (justLost bool) {
	q.mu.Lock()
	st := &q.state
	switch {
	case hasLeader:
		st.NoLeaderSince, st.Reached = time.Time{}, 0
	case st.NoLeaderSince.IsZero():
		st.NoLeaderSince = now
	}
	if voters >= 0 {
		st.Voters = voters
	}
	lost := !hasLeader && now.Sub(st.NoLeaderSince) >= NoLeaderGrace
	changed := st.Lost != lost
	st.Lost = lost
	if changed {
		// The calls tied to the current context end now; those made from here on get a new one.
		q.contextLocked()
		if lost {
			q.lostCancel()
		} else {
			q.lostCtx, q.lostCancel = nil, nil
		}
	}
	q.lost.Store(lost)
	since, voters := st.NoLeaderSince, st.Voters
	q.mu.Unlock()
	if !changed {
		return false
	}
	if lost {
		logger.Info("The etcd cluster has lost its quorum: this member has known no leader since; certapi answers its API 503 with Retry-After until a leader is back",
			"since", since, "voters", voters, "quorum", Quorum(voters))
	} else {
		logger.Info("The etcd cluster has its quorum again: this member knows a leader")
	}
	return lost
}

// setReached records that reached voting members answered the reach check, while the quorum is lost.
func (q *quorumObserver) setReached(reached int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state.Lost {
		q.state.Reached = reached
	}
}

// checkReach asks every other voting member for its status and records how many answered (a member
// without a leader answers too), with this one, while the quorum is lost.
func (m *Member) checkReach(ctx context.Context, c *clientv3.Client, members []Entry) {
	answers := askStatus(ctx, c, members, m.ID())
	reached := 1
	for _, mm := range members {
		if a, ok := answers[mm.ID]; ok && a.answered && !mm.IsLearner {
			reached++
		}
	}
	m.quorum.setReached(reached)
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
