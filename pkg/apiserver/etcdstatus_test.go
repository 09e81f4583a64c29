package apiserver

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/etcdcluster"
)

func TestEtcdClusterStatus(t *testing.T) {
	notAfter := time.Date(2036, 1, 2, 3, 4, 5, 600, time.UTC)
	rotateAt := time.Date(2032, 9, 1, 0, 0, 0, 0, time.UTC)
	members := []etcdcluster.Entry{
		{ID: 0x2, Name: "certapi-1"},
		{ID: 0x1, Name: "certapi-0"},
		{ID: 0xab, IsLearner: true},
	}
	peer := etcdcluster.PeerCAStatus{SerialNumber: "1f", NotAfter: notAfter, RotateAt: rotateAt, Rotating: true, Waiting: []string{"ab (not reached)"}}
	at := metav1.NewTime(rotateAt)
	tests := []struct {
		name string
		st   etcdcluster.Status
		want *v1alpha1.EtcdClusterStatus
	}{
		{"not the etcd leader: nothing to write", etcdcluster.Status{Members: 2, Learners: 1, PeerCA: peer}, nil},
		{"the etcd leader: every member by name, roles, health, the peer CA", etcdcluster.Status{
			Leader: true, Members: 2, Learners: 1, Healthy: map[string]bool{"certapi-0": true, "certapi-1": false}, PeerCA: peer,
		}, &v1alpha1.EtcdClusterStatus{
			Leader: "certapi-0",
			Members: []v1alpha1.EtcdMemberStatus{
				{Name: "ab", Role: v1alpha1.EtcdMemberLearner},
				{Name: "certapi-0", Role: v1alpha1.EtcdMemberVoter, Healthy: true},
				{Name: "certapi-1", Role: v1alpha1.EtcdMemberVoter},
			},
			PeerCA: &v1alpha1.EtcdPeerCAStatus{SerialNumber: "1f", NotAfter: metav1.NewTime(notAfter.Truncate(time.Second)), RotateAt: &at, Rotating: true, WaitingFor: []string{"ab (not reached)"}},
		}},
		{"a status without a peer CA: none shown", etcdcluster.Status{Leader: true, Healthy: map[string]bool{}}, &v1alpha1.EtcdClusterStatus{
			Leader: "certapi-0",
			Members: []v1alpha1.EtcdMemberStatus{
				{Name: "ab", Role: v1alpha1.EtcdMemberLearner},
				{Name: "certapi-0", Role: v1alpha1.EtcdMemberVoter},
				{Name: "certapi-1", Role: v1alpha1.EtcdMemberVoter},
			},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := etcdClusterStatus("certapi-0", members, tt.st)
			if !apiequality.Semantic.DeepEqual(got, tt.want) {
				t.Fatalf("etcdClusterStatus =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

// fakeMember is a member whose status the test sets; set tells the writer, as the member's listeners are.
type fakeMember struct {
	mu        sync.Mutex
	st        etcdcluster.Status
	listeners []dynamiccertificates.Listener
	// reads counts Status calls: one at the start of each of the writer's syncs.
	reads int
}

func (f *fakeMember) Name() string { return "certapi-0" }
func (f *fakeMember) Members() []etcdcluster.Entry {
	return []etcdcluster.Entry{{ID: 1, Name: "certapi-0"}}
}
func (f *fakeMember) Status() etcdcluster.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	return f.st
}

func (f *fakeMember) statusReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *fakeMember) AddStatusListener(l dynamiccertificates.Listener) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listeners = append(f.listeners, l)
	return func() {}
}

func (f *fakeMember) set(st etcdcluster.Status) {
	f.mu.Lock()
	f.st = st
	listeners := slices.Clone(f.listeners)
	f.mu.Unlock()
	for _, l := range listeners {
		l.Enqueue()
	}
}

// fakeCAStatus is CertificateAuthority/default's status store; its first failures writes fail.
type fakeCAStatus struct {
	mu                      sync.Mutex
	ca                      v1alpha1.CertificateAuthority
	failures, writes, calls int
}

func (f *fakeCAStatus) update(_ context.Context, mutate func(*v1alpha1.CertificateAuthority) bool) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.failures > 0 {
		f.failures--
		return apierrors.NewNotFound(v1alpha1.Resource("certificateauthorities"), v1alpha1.CertificateAuthorityName)
	}
	ca := f.ca.DeepCopy()
	if mutate(ca) {
		f.ca = *ca
		f.writes++
	}
	return nil
}

func (f *fakeCAStatus) get() (*v1alpha1.EtcdClusterStatus, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ca.Status.Etcd.DeepCopy(), f.writes
}

func (f *fakeCAStatus) updates() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

// TestEtcdStatusWriter: the etcd leader's view is written at start, retried after a failed write (the
// CertificateAuthority not created yet), written again when the member says it changed, and not
// rewritten when nothing it shows changed; a member that is not the etcd leader writes nothing.
func TestEtcdStatusWriter(t *testing.T) {
	member := &fakeMember{st: etcdcluster.Status{Leader: true, Members: 1, Healthy: map[string]bool{"certapi-0": true}}}
	store := &fakeCAStatus{failures: 1}
	w := newEtcdStatusWriter(member, store.update)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	waitForStatus := func(what string, cond func(*v1alpha1.EtcdClusterStatus, int) bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return cond(store.get()), nil
		})
		if err != nil {
			st, writes := store.get()
			t.Fatalf("timed out waiting for %s: status.etcd %+v after %d writes", what, st, writes)
		}
	}
	waitForStatus("the first write, after a failed one", func(st *v1alpha1.EtcdClusterStatus, writes int) bool {
		return writes == 1 && st != nil && st.Leader == "certapi-0" && len(st.Members) == 1 && st.Members[0].Healthy
	})

	member.set(etcdcluster.Status{Leader: true, Members: 1, Healthy: map[string]bool{"certapi-0": false}})
	waitForStatus("the member's change written", func(st *v1alpha1.EtcdClusterStatus, writes int) bool {
		return writes == 2 && st != nil && !st.Members[0].Healthy
	})

	// What the status shows did not change (CheckedAt is not shown): no call; nor from a follower. Each
	// is synced before the next is set (the one worker reads the status at the start of each sync, so a
	// second read means the first sync has returned). Then the member leads again with a new view.
	reads := member.statusReads()
	member.set(etcdcluster.Status{Leader: true, Members: 1, Healthy: map[string]bool{"certapi-0": false}, CheckedAt: time.Now()})
	waitForStatus("the unchanged view synced", func(*v1alpha1.EtcdClusterStatus, int) bool { return member.statusReads() > reads })
	member.set(etcdcluster.Status{Leader: false, Members: 1})
	waitForStatus("the follower's view synced", func(*v1alpha1.EtcdClusterStatus, int) bool { return member.statusReads() > reads+1 })
	member.set(etcdcluster.Status{Leader: true, Members: 1, Healthy: map[string]bool{"certapi-0": true}})
	waitForStatus("the leader's new view written", func(st *v1alpha1.EtcdClusterStatus, writes int) bool {
		return writes == 3 && st != nil && st.Members[0].Healthy
	})
	if calls := store.updates(); calls != 4 {
		t.Fatalf("%d calls to update the status; want 4 (a failed one, three writes): none for a change that shows nothing new, nor from a member that does not lead", calls)
	}
}
