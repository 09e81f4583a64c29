package etcdcluster

import (
	"fmt"
	"slices"
	"strings"
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

// StartAction is what a starting member does with its etcd.
type StartAction string

const (
	// StartRestart starts etcd on the existing data directory as it is: etcd knows its cluster.
	StartRestart StartAction = "Restart"
	// StartBootstrap starts a new one-member cluster (InitialClusterState=new).
	StartBootstrap StartAction = "Bootstrap"
	// StartJoin removes the stale entries StartPlan.Remove names, adds this member as a learner and
	// starts etcd with InitialClusterState=existing; the member promotes itself once it is in sync.
	StartJoin StartAction = "Join"
	// StartDiscardAndJoin moves the existing data directory aside (it belongs to a member the cluster
	// has removed: etcd would refuse to start on it) and then joins as StartJoin does.
	StartDiscardAndJoin StartAction = "DiscardAndJoin"
	// StartDiscardStale moves aside data of a cluster epoch before this member's (the cluster was restored
	// from a snapshot since), and the member then starts as one without data.
	StartDiscardStale StartAction = "DiscardStale"
	// StartRefuse starts nothing, for good: the data is of a later cluster epoch than this member's.
	StartRefuse StartAction = "Refuse"
	// StartWait starts nothing yet: look again later.
	StartWait StartAction = "Wait"
)

// StartInput is what a starting member knows when it decides how to start.
type StartInput struct {
	// Name and PeerURL are this member's name and advertised peer URL.
	Name, PeerURL string
	// HasData is true when the data directory holds an etcd member (a WAL).
	HasData bool
	// Epoch is this member's cluster epoch (--etcd-cluster-epoch); DataEpoch is the one its data directory
	// records (see EpochFileName).
	Epoch, DataEpoch int
	// Designated is true for the member that may bootstrap a new cluster: the StatefulSet's ordinal 0.
	Designated bool
	// Answered is true when a member of a running cluster answered; Members is its member list.
	Answered bool
	Members  []Entry
	// OtherPeersExist is true when another member's address resolves (its pod exists), answering or not.
	OtherPeersExist bool
	// ClusterExisted is true when a cluster is known to have been bootstrapped before (recorded outside
	// etcd, on the peer CA's Secret, by the member that bootstrapped it).
	ClusterExisted bool
	// OthersReportNoData is true when every other member the StatefulSet wants has reported, just now,
	// that it has no data and waits: the evidence that every volume was lost, not that the others are
	// restarting.
	OthersReportNoData bool
	// PublishedCA names the object in which a CA bundle that certapi published was found (the caBundle
	// of certapi's own APIService, e.g. "APIService v1alpha1.certapi.dev"), empty when none was: the
	// evidence, outside etcd, that a certapi ran with a CA before. With ClusterExisted false it was not
	// this cluster's: the single embedded member's (etcd.mode embedded), whose data this cluster lacks.
	PublishedCA string
}

// StartPlan is DecideStart's answer.
type StartPlan struct {
	Action StartAction
	// Remove lists the stale entries of this member's own name or peer URL to remove before it joins.
	Remove []uint64
	// Reason says why, for the log.
	Reason string
}

// DecideStart chooses how a member starts. The rules, in order:
//
//  0. With data of another cluster epoch: data of an earlier epoch is from before a restore; restarting
//     on it could restart the old cluster (two members with old data are a quorum of three), so it is
//     moved aside and the member starts as one without data (rule 2), but only once a member answered:
//     the restored one, or, in a rolling update, a member of the old cluster, which this one rejoins.
//     Until then it waits. An epoch raised with no restore behind it, the whole StatefulSet started at
//     once, must not move every member's data aside and bootstrap an empty cluster with a new CA: every
//     member waits instead and says which epoch to give back. Data of a later epoch means
//     --etcd-cluster-epoch was not raised with the restore: refuse, and say so.
//  1. With data: restart as is, unless a running cluster answered and lists no entry of this member's
//     name or peer URL. Then the cluster removed this member (a dead-member removal, or a scale-down that
//     kept the volume) and etcd would refuse the old data: move it aside and join. A member whose peers
//     do not answer restarts as is: etcd itself finds its cluster.
//  2. Without data, a cluster answered: join as a learner, first removing every entry of this member's
//     own name or peer URL. Such an entry belongs to this member's earlier life (its volume was lost) or
//     to a join that failed before it started; its data is gone, so the entry only counts against quorum.
//  3. Without data, nobody answered: only the designated member (ordinal 0) may bootstrap, and only when
//     no other member exists, no cluster ever existed, or every other member reports that it has no data
//     either (every volume was lost: there is nothing to wait for). The hazard is ordinal 0 losing its
//     volume while the others are briefly unreachable (restarting on their data): bootstrapping then
//     would make a second, empty cluster, and certapi a second CA. A member restarting on its data never
//     reports "no data", so ordinal 0 waits for it to answer and joins. Every other member without data
//     waits (and reports that it has none).
//  4. Without data, nobody answered, no cluster ever bootstrapped, but a CA bundle certapi published is
//     found (PublishedCA): a certapi ran with a CA on data that this cluster does not hold, the single
//     embedded member's when etcd.mode was switched from embedded to cluster without moving its data (a
//     `helm template | kubectl apply`, an Argo CD or Flux sync: nothing ran Helm's lookup guard).
//     Bootstrapping would start a new, empty cluster whose leader makes a second CA: refuse, and say how to
//     move the data (docs/backup-and-restore.md) or, when it is lost for good, how to allow a new CA.
//     A cluster that existed (rule 3) keeps its own rules: every volume lost is a recovery.
func DecideStart(in StartInput) StartPlan {
	var own []uint64
	for _, m := range in.Members {
		if m.same(in.Name, in.PeerURL) {
			own = append(own, m.ID)
		}
	}
	switch {
	case in.HasData && in.DataEpoch > in.Epoch:
		return StartPlan{Action: StartRefuse, Reason: fmt.Sprintf("the data directory is of cluster epoch %d, after this member's --etcd-cluster-epoch %d: "+
			"it was restored with --cluster-epoch %d; start every member with --etcd-cluster-epoch=%d (chart value etcd.cluster.epoch)",
			in.DataEpoch, in.Epoch, in.DataEpoch, in.DataEpoch)}
	case in.HasData && in.DataEpoch < in.Epoch && !in.Answered:
		return StartPlan{Action: StartWait, Reason: fmt.Sprintf("the data directory is of cluster epoch %d, before this member's --etcd-cluster-epoch %d, "+
			"and no member answered: waiting for the member restored with --cluster-epoch %d to start before moving this data aside; "+
			"if no member was restored, start every member with --etcd-cluster-epoch=%d (chart value etcd.cluster.epoch) again",
			in.DataEpoch, in.Epoch, in.Epoch, in.DataEpoch)}
	case in.HasData && in.DataEpoch < in.Epoch:
		return StartPlan{Action: StartDiscardStale, Reason: fmt.Sprintf("the data directory is of cluster epoch %d, before the restore that began epoch %d: "+
			"move it aside and start as a member without data", in.DataEpoch, in.Epoch)}
	case in.HasData && (!in.Answered || len(own) > 0):
		if !in.Answered {
			return StartPlan{Action: StartRestart, Reason: "the data directory holds a member and no other member answered: etcd finds its cluster itself"}
		}
		return StartPlan{Action: StartRestart, Reason: "the data directory holds a member the running cluster still lists"}
	case in.HasData:
		return StartPlan{Action: StartDiscardAndJoin, Reason: "the running cluster no longer lists this member: its data is from before it was removed"}
	case in.Answered:
		if len(in.Members) > 0 && len(own) == len(in.Members) {
			// Every entry is this member's own: the cluster is this member's earlier life alone, and
			// whoever answered is not a member. Nothing sane to join.
			return StartPlan{Action: StartWait, Reason: "the only members listed are this member's own stale entries: nothing to join"}
		}
		reason := "a running cluster answered: join as a learner"
		if len(own) > 0 {
			reason = fmt.Sprintf("a running cluster answered: remove %d stale entr(y/ies) of this member and join as a learner", len(own))
		}
		return StartPlan{Action: StartJoin, Remove: own, Reason: reason}
	case !in.Designated:
		return StartPlan{Action: StartWait, Reason: "no member answered and only the first member (ordinal 0) bootstraps a cluster"}
	case in.ClusterExisted && in.OtherPeersExist && !in.OthersReportNoData:
		return StartPlan{Action: StartWait, Reason: "a cluster was bootstrapped before and other members exist: wait for them to answer and join, never bootstrap a second cluster"}
	case in.ClusterExisted && in.OtherPeersExist:
		return StartPlan{Action: StartBootstrap, Reason: "a cluster existed but every member reports that it has no data (every volume was lost): bootstrap a new, empty cluster"}
	case !in.ClusterExisted && in.PublishedCA != "":
		return StartPlan{Action: StartRefuse, Reason: newClusterRefusal(in.PublishedCA)}
	default:
		return StartPlan{Action: StartBootstrap, Reason: "no data, no member answered, and this is the first member"}
	}
}

// newClusterRefusal is DecideStart's reason for rule 4: what was found, what bootstrapping would do, and
// the two ways on.
func newClusterRefusal(publishedCA string) string {
	return fmt.Sprintf("refusing to bootstrap a new, empty etcd cluster: this member has no data, no member answered and no cluster "+
		"of certapi's members was ever bootstrapped, but %s holds a CA bundle that certapi published, so a certapi ran with a CA "+
		"before on data this cluster does not hold (the single embedded member's, etcd.mode embedded); a new cluster would hold none "+
		"of its requests, and its leader would make a second CA. Move that data into the cluster first: a snapshot of it restored into this member's volume "+
		"(docs/backup-and-restore.md, \"From one embedded member to a cluster\"); until then keep running the single member "+
		"(etcd.mode embedded, replicas 1). Only if that data is lost for good and a new CA is wanted: remove the bundle "+
		"(kubectl patch apiservice %s --type=json -p '[{\"op\":\"remove\",\"path\":\"/spec/caBundle\"}]') and restart this pod",
		publishedCA, strings.TrimPrefix(publishedCA, "APIService "))
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

// DefaultPeerCARotateAt is the fraction of the peer CA's life after which the etcd leader rotates it by
// itself: two thirds, as certapi's serving CA (a third of its life is left for the rotation and for every
// replica to have restarted once before the old CA, and with it the chain to the new one, expires).
const DefaultPeerCARotateAt = 2.0 / 3

// PeerCAAction is what the etcd leader does with the peer CA.
type PeerCAAction string

const (
	// PeerCAKeep changes nothing.
	PeerCAKeep PeerCAAction = "Keep"
	// PeerCABegin starts a rotation: a new CA (PeerCA.Successor) signs from now on, trusted with the old
	// one; every member re-issues its certificate from it.
	PeerCABegin PeerCAAction = "Begin"
	// PeerCAFinish ends a rotation: every member presents a certificate of the new CA, so the old CA
	// leaves the bundle (PeerCA.Settled).
	PeerCAFinish PeerCAAction = "Finish"
)

// PeerCAMember is one member as the etcd leader saw the certificate it presents.
type PeerCAMember struct {
	Name string
	// Reached is true when a TLS handshake with the member's client URL succeeded.
	Reached bool
	// Current is true when the certificate it presented was signed by the CA that signs now.
	Current bool
}

// PeerCAInput is what the etcd leader knows of the peer CA when it decides.
type PeerCAInput struct {
	Now time.Time
	// NotBefore and NotAfter are the signing CA's validity.
	NotBefore, NotAfter time.Time
	// Rotating is true when the bundle trusts another CA besides the signing one.
	Rotating bool
	// Requested is the latest on-demand request (the Secret's annotation, set by `kubectl certapi rotate
	// --etcd-peer`); Handled the request the last rotation started for. A request is pending while they
	// differ.
	Requested, Handled string
	// Members are every member of the cluster, voting or learner: looked at only while Rotating.
	Members []PeerCAMember
	// RotateAt is the fraction of the CA's life after which it is rotated; 0 means DefaultPeerCARotateAt.
	RotateAt float64
}

// PeerCAPlan is DecidePeerCA's answer.
type PeerCAPlan struct {
	Action PeerCAAction
	// Handled is what Begin records as handled: the request it acts on, or Handled unchanged when the
	// rotation is the scheduled one.
	Handled string
	// RotateAt is when the signing CA is rotated by itself.
	RotateAt time.Time
	// Waiting names the members a rotation waits for (not reached, or presenting a certificate of the
	// old CA).
	Waiting []string
	// Reason says why, for the log and the status.
	Reason string
}

// DecidePeerCA chooses the etcd leader's next step with the peer CA. The rules, in order:
//
//  1. During a rotation: finish once every member presents a certificate of the new CA (then no process
//     needs the old CA's trust any more: members that still trust only the old CA verify the new
//     certificates through PeerCA.Chain); until then keep, naming the members waited for. An unreachable
//     member is waited for, never assumed: it may come back presenting the old CA's certificate. (A
//     member that starts re-issues its certificate from the Secret's CA at once.) A request made
//     meanwhile waits for the next rotation.
//  2. Otherwise begin when a request is pending (Requested set and not Handled), or when RotateAt of the
//     signing CA's life has passed.
//  3. Otherwise keep.
func DecidePeerCA(in PeerCAInput) PeerCAPlan {
	frac := in.RotateAt
	if frac <= 0 || frac >= 1 {
		frac = DefaultPeerCARotateAt
	}
	life := in.NotAfter.Sub(in.NotBefore)
	plan := PeerCAPlan{Action: PeerCAKeep, Handled: in.Handled, RotateAt: in.NotBefore.Add(time.Duration(float64(life) * frac).Round(time.Second))}
	if in.Rotating {
		for _, m := range in.Members {
			switch {
			case !m.Reached:
				plan.Waiting = append(plan.Waiting, m.Name+" (not reached)")
			case !m.Current:
				plan.Waiting = append(plan.Waiting, m.Name+" (presents the old CA's certificate)")
			}
		}
		if len(in.Members) == 0 {
			plan.Reason = "rotating the etcd peer CA: no member seen yet"
			return plan
		}
		if len(plan.Waiting) > 0 {
			plan.Reason = fmt.Sprintf("rotating the etcd peer CA: waiting for %d of %d members to present a certificate of the new CA: %s",
				len(plan.Waiting), len(in.Members), strings.Join(plan.Waiting, ", "))
			return plan
		}
		plan.Action = PeerCAFinish
		plan.Reason = fmt.Sprintf("every one of %d members presents a certificate of the new etcd peer CA: the old CA leaves the bundle", len(in.Members))
		return plan
	}
	if in.Requested != "" && in.Requested != in.Handled {
		plan.Action, plan.Handled = PeerCABegin, in.Requested
		plan.Reason = fmt.Sprintf("rotating the etcd peer CA on request %q", in.Requested)
		return plan
	}
	if !in.Now.Before(plan.RotateAt) {
		plan.Action = PeerCABegin
		plan.Reason = fmt.Sprintf("rotating the etcd peer CA: %.0f%% of its life has passed (it expires %s)", frac*100, in.NotAfter.UTC().Format(time.RFC3339))
		return plan
	}
	plan.Reason = fmt.Sprintf("the etcd peer CA rotates by itself at %s", plan.RotateAt.UTC().Format(time.RFC3339))
	return plan
}

// ReadinessSettle is how long a replica whose member has lost its quorum stays Ready whatever the other
// replicas' readiness shows. The members that took the quorum with them may still show Ready: kubelet
// marks a pod that hangs NotReady only after its readiness probe failed failureThreshold times, each
// after its timeout (3 x (2 s + 3 s) at most in the chart: 15 s), and the EndpointSlice follows within
// a second. A survivor that left on that stale word would leave the Service empty.
const ReadinessSettle = 20 * time.Second

// ReadinessInput is what a replica in cluster mode knows when it decides the etcd part of its /readyz.
type ReadinessInput struct {
	// Now is the time of the decision.
	Now time.Time
	// Quorum is what its member knows of the cluster's quorum.
	Quorum QuorumState
	// PeersKnown is true once the replicas' readiness is known: the EndpointSlices of certapi's
	// Service have been listed.
	PeersKnown bool
	// OthersReady names the other replicas that the Service's EndpointSlices list as Ready.
	OthersReady []string
}

// Readiness is the etcd part of a replica's /readyz.
type Readiness struct {
	// Ready is false when the replica must leave the Service's endpoints.
	Ready bool
	// CheckStorage is true when the storage's own readiness check (an etcd read) decides too: only
	// while the member knows a leader. Without one the read could only time out.
	CheckStorage bool
	// Reason says why, in words.
	Reason string
}

// DecideReadiness decides whether a replica stays Ready as far as its etcd cluster's quorum goes:
//
//   - with a quorum it is Ready (its storage check decides, as with any etcd);
//   - while its member knows no leader but has not yet held the quorum lost (NoLeaderGrace: an election,
//     or the quorum going) it stays Ready without asking etcd, which could only time out and, three
//     probes in a row, take the replica out of the Service for the moment before it would come back;
//   - without one it stays Ready only while no other replica of its Service is Ready. With two of three
//     members lost, the survivor keeps the Service an endpoint, so that kube-apiserver keeps certapi's
//     APIService Available (discovery, namespace deletion and garbage collection go on) and callers get
//     certapi's own 503 with Retry-After rather than the aggregator's bare 503; a member cut off from
//     healthy peers that still have their quorum leaves the Service to them;
//   - for the first ReadinessSettle of the loss it stays Ready whatever the others show: replicas that
//     stopped answering still show Ready until kubelet has noticed;
//   - without one, and before the Service's endpoints are known, it stays Ready: a wrong Ready costs a
//     share of 503s with Retry-After, which clients retry; a wrong not-Ready can leave the Service empty.
//
// When every member loses its quorum at once (every member cut off from every other), each sees the
// others Ready and leaves, then sees none Ready and comes back: the replicas leave and return together,
// every few seconds, until a quorum forms again (docs/high-availability.md).
func DecideReadiness(in ReadinessInput) Readiness {
	q := in.Quorum
	switch {
	case q.NoLeaderSince.IsZero():
		return Readiness{Ready: true, CheckStorage: true, Reason: "the etcd cluster has its quorum"}
	case !q.Lost:
		return Readiness{Ready: true, Reason: fmt.Sprintf("this member has known no leader for %s, less than %s: an election, or the quorum going; etcd is not asked",
			in.Now.Sub(q.NoLeaderSince).Round(100*time.Millisecond), NoLeaderGrace)}
	}
	lost := "the etcd cluster has no quorum (" + q.String() + ")"
	switch lostFor := in.Now.Sub(q.NoLeaderSince); {
	case lostFor < ReadinessSettle:
		return Readiness{Ready: true, Reason: fmt.Sprintf("%s; for the first %s of the loss this replica stays Ready whatever the others show (%s so far), and answers 503 with Retry-After",
			lost, ReadinessSettle, lostFor.Round(time.Second))}
	case !in.PeersKnown:
		return Readiness{Ready: true, Reason: lost + "; the other replicas' readiness is not known yet, so this replica stays Ready and answers 503 with Retry-After"}
	case len(in.OthersReady) == 0:
		return Readiness{Ready: true, Reason: lost + "; no other replica is Ready, so this one stays Ready and answers 503 with Retry-After, keeping the APIService Available"}
	default:
		others := slices.Clone(in.OthersReady)
		slices.Sort(others)
		return Readiness{Reason: lost + "; other replicas are Ready (" + strings.Join(others, ", ") + "): this one leaves the Service to them"}
	}
}

// String says what a member without a quorum sees, e.g. "this member reaches 1 of 3 voting members, a
// quorum is 2, no leader since 2026-12-02T22:40:00Z".
func (q QuorumState) String() string {
	var b strings.Builder
	switch {
	case q.Voters == 0:
		b.WriteString("this member knows no leader")
	case q.Reached > 0:
		fmt.Fprintf(&b, "this member reaches %d of %d voting members, a quorum is %d", q.Reached, q.Voters, Quorum(q.Voters))
	default:
		fmt.Fprintf(&b, "this member knows %d voting members and no leader, a quorum is %d", q.Voters, Quorum(q.Voters))
	}
	if !q.NoLeaderSince.IsZero() {
		fmt.Fprintf(&b, ", no leader since %s", q.NoLeaderSince.UTC().Format(time.RFC3339))
	}
	return b.String()
}
