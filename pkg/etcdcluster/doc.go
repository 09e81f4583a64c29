// Package etcdcluster forms and keeps the etcd cluster of certapi's replicas: each replica runs an
// embedded etcd member, the first one (StatefulSet ordinal 0) bootstraps the cluster, the others join
// as learners and promote themselves once in sync, a member whose volume was lost rejoins under its old
// name after its stale entry is removed, and the etcd leader removes members that stay dead longer than
// a timeout, never when that could lose quorum or data (DecideMaintenance). Peer and client traffic is
// mutual TLS from a peer CA (PeerCA) that the caller supplies: the Kubernetes side that keeps it in a
// Secret lives outside this package, so the cluster logic runs and is tested with a CA given directly.
// The etcd leader rotates the peer CA through a PeerCAStore (DecidePeerCA), with no restart: the new CA
// is trusted beside the old one and vouched for by it (PeerCA.Chain), every member re-issues its
// certificate, and the old CA leaves the bundle once every member presents a new one.
//
// The decisions are pure functions (decide.go: membership; decidestart.go, decidepeerca.go,
// decidereadiness.go); the Member acts on them, one job to a file (see the Member type).
package etcdcluster
