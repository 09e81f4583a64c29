package etcdcluster

import (
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/notify"
)

// Status is what a member knows of its cluster, for metrics and `kubectl certapi status`.
type Status struct {
	// Members and Learners count voting members and learners in the latest member list.
	Members, Learners int
	// Leader is true when this member is the etcd leader.
	Leader bool
	// Healthy maps member names to their health, as the etcd leader checked it (empty elsewhere).
	Healthy map[string]bool
	// Decision is the maintenance loop's latest reason to remove or keep a dead member ("" when none
	// was considered).
	Decision string
	// CheckedAt is when this status was taken.
	CheckedAt time.Time
	// PeerCA is the peer CA as this member knows it.
	PeerCA PeerCAStatus
}

// PeerCAStatus is the peer CA's state, for `kubectl certapi status` and the log.
type PeerCAStatus struct {
	// SerialNumber and NotAfter are the signing CA's.
	SerialNumber string
	NotAfter     time.Time
	// Rotating is true while the bundle trusts the CA it replaces too.
	Rotating bool
	// RotateAt is when the etcd leader rotates it by itself (set on the etcd leader).
	RotateAt time.Time
	// Waiting names the members a rotation waits for (on the etcd leader).
	Waiting []string
	// Reason is the etcd leader's latest decision, in words.
	Reason string
}

// statusBoard holds the latest Status the maintenance loop took and tells listeners when what it shows
// changes. It has its own lock: the maintenance loop writes it once a round, and readers (the status
// writer, `kubectl certapi status`) read it at any time without waiting on anything else the member does.
type statusBoard struct {
	mu     sync.Mutex
	status Status
	// listeners hear when Status changes in more than its time (see AddStatusListener).
	listeners notify.Listeners
}

// get returns the latest status.
func (b *statusBoard) get() Status {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.status
}

// set records st, tells the listeners when it shows something else than the status before it, and
// publishes it as metrics.
func (b *statusBoard) set(st Status) {
	b.mu.Lock()
	changed := !sameShown(b.status, st)
	b.status = st
	b.mu.Unlock()
	if changed {
		defer b.listeners.Notify()
	}
	metrics.EtcdMembers.WithLabelValues("voter").Set(float64(st.Members))
	metrics.EtcdMembers.WithLabelValues("learner").Set(float64(st.Learners))
	leader := 0.0
	if st.Leader {
		leader = 1
	}
	metrics.EtcdLeader.Set(leader)
	// Only the etcd leader checks health; elsewhere the series would be stale.
	metrics.EtcdMemberHealthy.Reset()
	for name, ok := range st.Healthy {
		v := 0.0
		if ok {
			v = 1
		}
		metrics.EtcdMemberHealthy.WithLabelValues(name).Set(v)
	}
}

// Status returns the latest status the maintenance loop saw.
func (m *Member) Status() Status { return m.status.get() }

// AddStatusListener adds lis, told whenever Status changes in what it shows (the member counts, the
// leadership, health, the peer CA and what its rotation waits for; not CheckedAt, nor the reasons'
// words), until remove is called. A cluster that does not change tells nobody anything.
func (m *Member) AddStatusListener(lis dynamiccertificates.Listener) (remove func()) {
	return m.status.listeners.AddListener(lis)
}

// sameShown reports whether a and b show the same: everything but the time and the reasons' words.
func sameShown(a, b Status) bool {
	pa, pb := a.PeerCA, b.PeerCA
	return a.Members == b.Members && a.Learners == b.Learners && a.Leader == b.Leader && maps.Equal(a.Healthy, b.Healthy) &&
		pa.SerialNumber == pb.SerialNumber && pa.NotAfter.Equal(pb.NotAfter) && pa.Rotating == pb.Rotating &&
		pa.RotateAt.Equal(pb.RotateAt) && slices.Equal(pa.Waiting, pb.Waiting)
}
