package apiserver

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/certapi/certapi/pkg/controller"

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
// nothing and makes no call at all. It is a single-key sync on the project's queue: every change of the
// member's status queues the one key, and a write that fails (CertificateAuthority/default not created
// yet, etcd briefly without a leader) is retried with the queue's backoff, up to a minute apart.
type etcdStatusWriter struct {
	member etcdStatusSource
	// update writes CertificateAuthority/default's status (certificateauthority.StatusUpdater).
	update func(ctx context.Context, mutate func(*v1alpha1.CertificateAuthority) bool) error
	queue  *controller.Queue[string]
	// written is the status last written; only the queue's one worker reads and writes it.
	written *v1alpha1.EtcdClusterStatus
}

// etcdStatusSource is what the writer reads of this replica's member (*etcdcluster.Member).
type etcdStatusSource interface {
	Name() string
	Members() []etcdcluster.Entry
	Status() etcdcluster.Status
	AddStatusListener(dynamiccertificates.Listener) (remove func())
}

// etcdStatusKey is the writer's one key: there is one status.etcd.
const etcdStatusKey = "status.etcd"

// etcdStatusBackoffBase and etcdStatusBackoffMax bound the retries of a failed write.
const etcdStatusBackoffBase, etcdStatusBackoffMax = time.Second, time.Minute

func newEtcdStatusWriter(member etcdStatusSource, update func(context.Context, func(*v1alpha1.CertificateAuthority) bool) error) *etcdStatusWriter {
	w := &etcdStatusWriter{member: member, update: update}
	w.queue = controller.NewQueue(controller.QueueOptions[string]{
		Name: "etcd-cluster-status", Sync: w.sync, BackoffBase: etcdStatusBackoffBase, BackoffMax: etcdStatusBackoffMax,
		// CertificateAuthority/default not created yet, or a write that raced another: retried quietly.
		Quiet: func(err error) bool { return apierrors.IsNotFound(err) || apierrors.IsConflict(err) },
	})
	return w
}

// run writes until ctx ends.
func (w *etcdStatusWriter) run(ctx context.Context) {
	remove := w.member.AddStatusListener(notify.ListenerFunc(func() { w.queue.Add(etcdStatusKey) }))
	defer remove()
	w.queue.Add(etcdStatusKey)
	_ = w.queue.Run(ctx) // runs once: the writer is made for this run
}

// sync writes what the member shows now, unless it was written already or this member is not the etcd
// leader.
func (w *etcdStatusWriter) sync(ctx context.Context, _ string) (controller.Result, error) {
	want := etcdClusterStatus(w.member.Name(), w.member.Members(), w.member.Status())
	if want == nil {
		// Not the etcd leader: the leader writes. Should this member lead again, it writes its view.
		w.written = nil
		return controller.Result{}, nil
	}
	if w.written != nil && apiequality.Semantic.DeepEqual(want, w.written) {
		return controller.Result{}, nil
	}
	err := w.update(ctx, func(ca *v1alpha1.CertificateAuthority) bool {
		if apiequality.Semantic.DeepEqual(ca.Status.Etcd, want) {
			return false
		}
		ca.Status.Etcd = want
		return true
	})
	if err != nil {
		return controller.Result{}, fmt.Errorf("writing the etcd cluster's status into CertificateAuthority/%s: %w", v1alpha1.CertificateAuthorityName, err)
	}
	w.written = want
	return controller.Result{}, nil
}
