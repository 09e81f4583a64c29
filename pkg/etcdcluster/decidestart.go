package etcdcluster

import (
	"fmt"
	"strings"
)

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
