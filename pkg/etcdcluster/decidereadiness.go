package etcdcluster

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

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
