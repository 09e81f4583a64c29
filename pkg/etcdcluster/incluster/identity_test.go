package incluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestDecidePodIdentity(t *testing.T) {
	rules := PodIdentityRules{Namespace: "certapi-system", ServiceAccount: "certapi", StatefulSet: "certapi", Audience: MemberTokenAudience}
	pod := func(mut func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "certapi-1", Namespace: "certapi-system", UID: "uid-1", OwnerReferences: []metav1.OwnerReference{
				{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "certapi", UID: "sts", Controller: ptr.To(true)},
			}},
			Status: corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.0.0.7"}, {IP: "fd00::7"}}},
		}
		if mut != nil {
			mut(p)
		}
		return p
	}
	good := func(mut func(*PodIdentity)) PodIdentity {
		id := PodIdentity{
			Authenticated: true, Audiences: []string{MemberTokenAudience}, Username: "system:serviceaccount:certapi-system:certapi",
			PodName: "certapi-1", PodUID: "uid-1", Pod: pod(nil),
		}
		if mut != nil {
			mut(&id)
		}
		return id
	}
	tests := []struct {
		name    string
		id      PodIdentity
		wantErr string
	}{
		{name: "a token of a live pod of the StatefulSet", id: good(nil)},
		{name: "not authenticated", id: good(func(id *PodIdentity) { id.Authenticated = false; id.Error = "token expired" }), wantErr: "did not authenticate the token for audience \"certapi.dev/etcd-member\": token expired"},
		{name: "another audience", id: good(func(id *PodIdentity) { id.Audiences = []string{"https://kubernetes.default.svc"} }), wantErr: "not for audience"},
		{name: "another ServiceAccount", id: good(func(id *PodIdentity) { id.Username = "system:serviceaccount:certapi-system:default" }), wantErr: "not the ServiceAccount certapi-system/certapi's"},
		{name: "a user, not a ServiceAccount", id: good(func(id *PodIdentity) { id.Username = "alice" }), wantErr: "\"alice\"'s"},
		{name: "a token bound to no pod", id: good(func(id *PodIdentity) { id.PodName, id.PodUID = "", "" }), wantErr: "bound to no pod"},
		{name: "the pod is gone", id: good(func(id *PodIdentity) { id.Pod = nil }), wantErr: "does not exist"},
		{name: "a token of an earlier pod of the same name", id: good(func(id *PodIdentity) { id.PodUID = "uid-0" }), wantErr: "earlier pod"},
		{name: "the pod is being deleted", id: good(func(id *PodIdentity) {
			id.Pod = pod(func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{} })
		}), wantErr: "being deleted"},
		{name: "a pod of another StatefulSet", id: good(func(id *PodIdentity) {
			id.Pod = pod(func(p *corev1.Pod) { p.OwnerReferences[0].Name = "other" })
		}), wantErr: "not controlled by the StatefulSet certapi"},
		{name: "a pod no controller owns", id: good(func(id *PodIdentity) {
			id.Pod = pod(func(p *corev1.Pod) { p.OwnerReferences = nil })
		}), wantErr: "not controlled"},
		{name: "a pod a ReplicaSet controls", id: good(func(id *PodIdentity) {
			id.Pod = pod(func(p *corev1.Pod) { p.OwnerReferences[0].Kind = "ReplicaSet" })
		}), wantErr: "not controlled"},
		{name: "a pod name without an ordinal", id: good(func(id *PodIdentity) {
			id.PodName = "certapi-x"
			id.Pod = pod(func(p *corev1.Pod) { p.Name = "certapi-x" })
		}), wantErr: "<statefulset>-<ordinal>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecidePodIdentity(tt.id, rules)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecidePodIdentity = %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != "certapi-1" || strings.Join(got.IPs, ",") != "10.0.0.7,fd00::7" {
				t.Fatalf("DecidePodIdentity = %+v, want certapi-1 with the pod's IPs", got)
			}
		})
	}
}
