package apiserver

import (
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
