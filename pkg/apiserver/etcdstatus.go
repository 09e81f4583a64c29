package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/notify"
)

// etcdClusterStatus is what CertificateAuthority/default's status.etcd shows of certapi's own etcd
// cluster, from the member named self: nil unless that member is the etcd leader (only it checks every
// member's health, and one writer keeps the status from flapping between views).
func etcdClusterStatus(self string, members []etcdcluster.Entry, st etcdcluster.Status) *v1alpha1.EtcdClusterStatus {
	if !st.Leader {
		return nil
	}
	out := &v1alpha1.EtcdClusterStatus{Leader: self}
	for _, e := range members {
		name := e.Name
		if name == "" {
			name = fmt.Sprintf("%x", e.ID)
		}
		role := v1alpha1.EtcdMemberVoter
		if e.IsLearner {
			role = v1alpha1.EtcdMemberLearner
		}
		out.Members = append(out.Members, v1alpha1.EtcdMemberStatus{Name: name, Role: role, Healthy: st.Healthy[name]})
	}
	slices.SortFunc(out.Members, func(a, b v1alpha1.EtcdMemberStatus) int { return strings.Compare(a.Name, b.Name) })
	if p := st.PeerCA; p.SerialNumber != "" {
		ca := &v1alpha1.EtcdPeerCAStatus{
			SerialNumber: p.SerialNumber, NotAfter: metav1.NewTime(p.NotAfter.UTC().Truncate(time.Second)),
			Rotating: p.Rotating, WaitingFor: slices.Clone(p.Waiting),
		}
		if !p.RotateAt.IsZero() {
			at := metav1.NewTime(p.RotateAt.UTC().Truncate(time.Second))
			ca.RotateAt = &at
		}
		out.PeerCA = ca
	}
	return out
}

// etcdStatusWriter writes status.etcd while this replica's member is the etcd leader, each time what it
// shows changes (the member tells it: AddStatusListener), in this process: an idle cluster writes
// nothing and makes no call at all.
type etcdStatusWriter struct {
	member *etcdcluster.Member
	// update writes CertificateAuthority/default's status (certificateauthority.StatusUpdater).
	update func(ctx context.Context, mutate func(*v1alpha1.CertificateAuthority) bool) error
}

// run writes until ctx ends. A write that fails (CertificateAuthority/default not created yet, etcd
// briefly without a leader) is tried again after a backoff, up to a minute apart.
func (w *etcdStatusWriter) run(ctx context.Context) {
	changed := make(chan struct{}, 1)
	remove := w.member.AddStatusListener(notify.ListenerFunc(func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}))
	defer remove()
	retry := time.NewTimer(0)
	defer retry.Stop()
	const firstBackoff = time.Second
	backoff := firstBackoff
	var written *v1alpha1.EtcdClusterStatus
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-retry.C:
		}
		st := w.member.Status()
		want := etcdClusterStatus(w.member.Name(), w.member.Members(), st)
		if want == nil {
			// Not the etcd leader: the leader writes. Should this member lead again, it writes its view.
			written = nil
			continue
		}
		if written != nil && apiequality.Semantic.DeepEqual(want, written) {
			continue
		}
		err := w.update(ctx, func(ca *v1alpha1.CertificateAuthority) bool {
			if apiequality.Semantic.DeepEqual(ca.Status.Etcd, want) {
				return false
			}
			ca.Status.Etcd = want
			return true
		})
		if err != nil {
			klog.V(1).InfoS("Writing the etcd cluster's status failed; trying again", "err", err, "after", backoff)
			retry.Reset(backoff)
			backoff = min(2*backoff, time.Minute)
			continue
		}
		written, backoff = want, firstBackoff
	}
}
