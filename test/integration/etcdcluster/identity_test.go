package etcdcluster

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
)

// TestPodTokenVerifier: against a real kube-apiserver, a projected token of a pod of certapi's
// StatefulSet, for the members' audience, establishes that pod's member; a token for another audience,
// of another ServiceAccount, of a pod that is gone and was made again under the same name, or of a pod
// the StatefulSet does not control establishes nothing. And the peer CA Secret, kept public only, holds
// no key from the start, and a Secret of an earlier version loses its key with DropKey.
func TestPodTokenVerifier(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns = "certapi-system"
	kube := startKubeAPIServer(ctx, t, ns)
	for _, sa := range []string{"certapi", "default"} {
		if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"app": "certapi"}
	sts, err := kube.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "certapi"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: labels}, ServiceName: "certapi-etcd",
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "certapi", Image: "certapi"}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// No controller runs here: the pods are made as the StatefulSet controller would make them.
	makePod := func(name, sa string, owned bool) *corev1.Pod {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "certapi", Image: "certapi"}}},
		}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: ptr.To(true)}}
		}
		created, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	token := func(sa string, pod *corev1.Pod, audience string) string {
		t.Helper()
		tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](600),
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	v := &incluster.PodTokenVerifier{Client: kube, Rules: incluster.PodIdentityRules{Namespace: ns, ServiceAccount: "certapi", StatefulSet: "certapi", Audience: incluster.MemberTokenAudience}}

	member1 := makePod("certapi-1", "certapi", true)
	t0 := time.Now()
	id, err := v.Verify(ctx, token("certapi", member1, incluster.MemberTokenAudience))
	if err != nil {
		t.Fatalf("a member's token: %v", err)
	}
	t.Logf("figure: one verification (a TokenReview and a read of the pod) took %s", time.Since(t0).Round(time.Millisecond))
	if id.Name != "certapi-1" {
		t.Fatalf("the token establishes %q, want certapi-1", id.Name)
	}

	stranger := makePod("certapi-2", "default", true)
	unowned := makePod("certapi-3", "certapi", false)
	gone := makePod("certapi-4", "certapi", true)
	goneToken := token("certapi", gone, incluster.MemberTokenAudience)
	if err := kube.CoreV1().Pods(ns).Delete(ctx, gone.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	makePod("certapi-4", "certapi", true)
	for _, tc := range []struct{ name, token, want string }{
		{"a token for the API server's audience", token("certapi", member1, "https://kubernetes.default.svc.cluster.local"), "did not authenticate the token"},
		{"a token of another ServiceAccount", token("default", stranger, incluster.MemberTokenAudience), "not the ServiceAccount certapi-system/certapi's"},
		{"a token of a pod the StatefulSet does not control", token("certapi", unowned, incluster.MemberTokenAudience), "not controlled by the StatefulSet certapi"},
		{"a token of a deleted pod whose name was taken again", goneToken, "did not authenticate"},
		{"no token at all", "not-a-token", "did not authenticate"},
	} {
		if id, err := v.Verify(ctx, tc.token); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: established %+v, %v; want an error containing %q", tc.name, id, err, tc.want)
		}
	}

	t.Log("the peer CA Secret, public only: created by ordinal 0 without a key; a Secret with one loses it to DropKey")
	first := &incluster.PeerCASecret{Client: kube, Namespace: ns, Name: "public-peer-ca", Member: "certapi-0", PublicOnly: true, Designated: true}
	ca, err := first.LoadOrCreate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ca.Key == nil {
		t.Fatal("ordinal 0 does not hold the key of the CA it made")
	}
	sec, err := kube.CoreV1().Secrets(ns).Get(ctx, "public-peer-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.Data[corev1.TLSPrivateKeyKey]) != 0 || strings.Contains(string(sec.Data[corev1.TLSCertKey]), "PRIVATE KEY") {
		t.Fatal("the public-only peer CA Secret holds a key")
	}
	other := &incluster.PeerCASecret{Client: kube, Namespace: ns, Name: "public-peer-ca", Member: "certapi-1", PublicOnly: true}
	got, err := other.LoadOrCreate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != nil || !got.Certificate.Equal(ca.Certificate) {
		t.Fatal("another member reads a key, or another CA, from the public-only Secret")
	}

	legacy := &incluster.PeerCASecret{Client: kube, Namespace: ns, Name: "legacy-peer-ca", Member: "certapi-0"}
	old, err := legacy.LoadOrCreate(ctx)
	if err != nil || old.Key == nil {
		t.Fatalf("a Secret as earlier versions keep it: %v (key held: %v)", err, old != nil && old.Key != nil)
	}
	rotate := etcdcluster.KeyLeftStoreRotation(old)
	if err := legacy.DropKey(ctx, old, rotate); err != nil {
		t.Fatal(err)
	}
	sec, err = kube.CoreV1().Secrets(ns).Get(ctx, "legacy-peer-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.Data[corev1.TLSPrivateKeyKey]) != 0 {
		t.Fatal("DropKey left the key in the Secret")
	}
	if got := sec.Annotations[certapiv1alpha1.AnnotationEtcdPeerCARotate]; got != rotate {
		t.Fatalf("DropKey asked for the rotation %q; want %q in the same write", got, rotate)
	}
	if err := legacy.DropKey(ctx, &etcdcluster.PeerCA{Certificate: ca.Certificate}, ""); err == nil {
		t.Fatal("DropKey changed a Secret that holds another CA")
	}
}
