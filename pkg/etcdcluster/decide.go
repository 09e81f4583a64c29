package etcdcluster

import (
	"fmt"
	"slices"
	"time"
)

// Entry is what the decisions need to know of one entry of the etcd member list.
type Entry struct {
	// ID is etcd's member ID.
	ID uint64
	// Name is the member's name; etcd leaves it empty until a member added with MemberAdd(AsLearner)
	// has started for the first time.
	Name string
	// PeerURLs are the member's advertised peer URLs.
	PeerURLs []string
	// ClientURLs are the member's advertised client URLs; empty until it has started.
	ClientURLs []string
	// IsLearner is true for a member that replicates but does not vote.
	IsLearner bool
}

// same reports whether m is the entry of the member called name or advertising peerURL.
func (m Entry) same(name, peerURL string) bool {
	return (name != "" && m.Name == name) || slices.Contains(m.PeerURLs, peerURL)
}

// Quorum is the number of voting members a cluster of n voting members needs to commit: a majority.
func Quorum(n int) int { return n/2 + 1 }

// MemberState is one member as the etcd leader's maintenance loop sees it.
type MemberState struct {
	Entry
	// Healthy is true when the member answered a status call just now.
	Healthy bool
	// UnhealthySince is when it was first seen unhealthy in a row of failed checks; zero when healthy.
	UnhealthySince time.Time
	// Departed is true when the member's pod is gone for good: the StatefulSet was scaled below its
	// ordinal. Such a member does not wait out the dead-member timeout once it is unhealthy.
	Departed bool
}

// MaintenanceAction is what the leader's maintenance loop does next.
type MaintenanceAction struct {
	// Remove is true to remove the member ID.
	Remove bool
	ID     uint64
	Name   string
	// Reason says why, or why not, for the log and events; set whenever a removal was considered.
	Reason string
}

// DefaultStalledLearnerTimeout is how long a learner may stay unhealthy before the leader removes it
// (voting members wait out the dead-member timeout). etcd takes one learner at a time, so a learner whose pod crash-loops or
// never started (killed between its MemberAdd and its start) keeps every other member from joining; it
// holds no vote and no data the cluster needs, and its own pod rejoins when it comes back (DecideStart).
// A learner that starts answers within seconds of being added, so a minute is no hazard to a join.
const DefaultStalledLearnerTimeout = time.Minute

// MaintenanceInput is what the leader knows when it plans.
type MaintenanceInput struct {
	Members []MemberState
	Now     time.Time
	// DeadMemberTimeout is how long a member must have been unhealthy to be removed; 0 never removes.
	DeadMemberTimeout time.Duration
	// StalledLearnerTimeout is the same for a learner; 0 means DefaultStalledLearnerTimeout. (Removal
	// stays off for learners too when DeadMemberTimeout is 0.)
	StalledLearnerTimeout time.Duration
}

// DecideMaintenance chooses at most one member to remove: one removal at a time, the loop looks again
// after each. A member may be removed only when all of these hold:
//
//   - it has been unhealthy for at least DeadMemberTimeout (a learner: StalledLearnerTimeout), or it is unhealthy and Departed (scaled away: its pod will not come
//     back), and the timeout is not 0 (0 turns automatic removal off);
//   - it is not the last member;
//   - for a voting member: the started, healthy voting members that remain are a quorum both of the
//     cluster after the removal and of the cluster before it. The second is the stronger of the two: it
//     means the cluster can commit the removal without the member, and every committed write is on a
//     healthy member that stays, so no data is lost with it. With 3 voters and 1 dead, 2 healthy >= 2:
//     removed. With 3 voters and 2 dead, 1 < 2: refused (the cluster has no quorum; only the dead members
//     coming back can help, and removing one would be a lie about who holds the data). With 2 voters and
//     1 dead: refused, never shrinking to one member whose loss would lose everything.
//   - a learner holds no vote and no data the cluster needs: it is removed after its timeout (a join
//     that failed, a pod that never came back or crash-loops) as long as the voters have quorum, so
//     that it does not hold etcd's one learner slot against the members waiting to join.
//
// Of several candidates the one unhealthy longest goes first (then the lower ID).
func DecideMaintenance(in MaintenanceInput) MaintenanceAction {
	if in.DeadMemberTimeout <= 0 || len(in.Members) < 2 {
		return MaintenanceAction{}
	}
	voters, healthyVoters := 0, 0
	for _, m := range in.Members {
		if !m.IsLearner {
			voters++
			if m.Healthy && m.Name != "" {
				healthyVoters++
			}
		}
	}
	var candidates []MemberState
	for _, m := range in.Members {
		if !m.Healthy && !m.UnhealthySince.IsZero() && (m.Departed || in.Now.Sub(m.UnhealthySince) >= in.timeout(m)) {
			candidates = append(candidates, m)
		}
	}
	if len(candidates) == 0 {
		return MaintenanceAction{}
	}
	slices.SortFunc(candidates, func(a, b MemberState) int {
		if c := a.UnhealthySince.Compare(b.UnhealthySince); c != 0 {
			return c
		}
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	m := candidates[0]
	gone := in.Now.Sub(m.UnhealthySince).Round(time.Second)
	if healthyVoters < Quorum(voters) {
		return MaintenanceAction{ID: m.ID, Name: m.Name, Reason: fmt.Sprintf(
			"not removing member %q (unhealthy for %s): only %d of %d voting members are healthy, fewer than the quorum of %d", m.Name, gone, healthyVoters, voters, Quorum(voters))}
	}
	if !m.IsLearner && healthyVoters < Quorum(voters-1) {
		// Implied by the check above (Quorum(n-1) <= Quorum(n)); kept so the rule reads as written.
		return MaintenanceAction{ID: m.ID, Name: m.Name, Reason: fmt.Sprintf(
			"not removing member %q: %d healthy voting members would not be a quorum of %d", m.Name, healthyVoters, voters-1)}
	}
	kind := "voting member"
	if m.IsLearner {
		kind = "learner"
	}
	why := fmt.Sprintf("unhealthy for %s, longer than the dead-member timeout of %s", gone, in.DeadMemberTimeout)
	switch {
	case m.Departed && gone < in.timeout(m):
		why = "scaled away and stopped"
	case m.IsLearner:
		why = fmt.Sprintf("a learner unhealthy for %s, longer than %s: it holds the one learner slot that members waiting to join need", gone, in.timeout(m))
	}
	return MaintenanceAction{Remove: true, ID: m.ID, Name: m.Name, Reason: fmt.Sprintf(
		"removing %s %q (ID %x): %s; %d of %d voting members are healthy", kind, m.Name, m.ID, why, healthyVoters, voters)}
}

// timeout is how long m must have been unhealthy to be removed.
func (in MaintenanceInput) timeout(m MemberState) time.Duration {
	if m.IsLearner {
		stalled := in.StalledLearnerTimeout
		if stalled <= 0 {
			stalled = DefaultStalledLearnerTimeout
		}
		return stalled
	}
	return in.DeadMemberTimeout
}

// HealthTracker remembers since when each member has been unhealthy, from one check to the next. It
// lives in memory on the member that runs the maintenance loop: after a restart or a change of etcd
// leader the clock starts again, which can only delay a removal, never hasten it.
type HealthTracker struct {
	since map[uint64]time.Time
}

// Observe records one round of health checks at now and returns the members with their state. Members
// no longer listed are forgotten.
func (t *HealthTracker) Observe(now time.Time, members []Entry, healthy map[uint64]bool) []MemberState {
	if t.since == nil {
		t.since = map[uint64]time.Time{}
	}
	listed := map[uint64]bool{}
	out := make([]MemberState, 0, len(members))
	for _, m := range members {
		listed[m.ID] = true
		s := MemberState{Entry: m, Healthy: healthy[m.ID]}
		if s.Healthy {
			delete(t.since, m.ID)
		} else {
			if _, ok := t.since[m.ID]; !ok {
				t.since[m.ID] = now
			}
			s.UnhealthySince = t.since[m.ID]
		}
		out = append(out, s)
	}
	for id := range t.since {
		if !listed[id] {
			delete(t.since, id)
		}
	}
	return out
}
