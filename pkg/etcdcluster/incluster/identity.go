package incluster

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/pkg/etcdcluster"
)

// MemberTokenAudience is the audience of the projected ServiceAccount token with which a certapi pod
// proves, when it joins, that it is a pod of certapi's StatefulSet. A token for another audience (the
// ServiceAccount's API token among them) is refused, and this one is good for nothing else.
const MemberTokenAudience = "certapi.dev/etcd-member"

// The extra fields kube-apiserver puts in a TokenReview of a token bound to a pod.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// PodIdentity is what a TokenReview and the pod it names say of an enrollment's proof.
type PodIdentity struct {
	// Authenticated and Error are the TokenReview's status; Audiences the audiences it accepted.
	Authenticated bool
	Error         string
	Audiences     []string
	// Username is the token's user; PodName and PodUID the pod it is bound to (empty: none).
	Username, PodName, PodUID string
	// Pod is the pod of that name as kube-apiserver has it now; nil when there is none.
	Pod *corev1.Pod
}

// PodIdentityRules are what a member's proof must show: a token for Audience, of ServiceAccount in
// Namespace, bound to a live pod that StatefulSet controls.
type PodIdentityRules struct {
	Namespace, ServiceAccount, StatefulSet, Audience string
}

// DecidePodIdentity says which member the proof in id establishes, or why it establishes none. The
// token must be one kube-apiserver issued for the rules' audience to the rules' ServiceAccount, bound to
// a pod that exists now with the same UID (a token of a deleted pod that had the same name is refused),
// is not being deleted, and is controlled by the rules' StatefulSet. The member's name is its pod's name.
func DecidePodIdentity(id PodIdentity, r PodIdentityRules) (etcdcluster.Identity, error) {
	switch {
	case !id.Authenticated:
		return etcdcluster.Identity{}, fmt.Errorf("kube-apiserver did not authenticate the token for audience %q: %s", r.Audience, orNone(id.Error))
	case !slices.Contains(id.Audiences, r.Audience):
		return etcdcluster.Identity{}, fmt.Errorf("the token is not for audience %q", r.Audience)
	case id.Username != serviceaccount.MakeUsername(r.Namespace, r.ServiceAccount):
		return etcdcluster.Identity{}, fmt.Errorf("the token is %q's, not the ServiceAccount %s/%s's", id.Username, r.Namespace, r.ServiceAccount)
	case id.PodName == "" || id.PodUID == "":
		return etcdcluster.Identity{}, fmt.Errorf("the token is bound to no pod: a member proves itself with a projected ServiceAccount token of its pod (audience %q)", r.Audience)
	case id.Pod == nil:
		return etcdcluster.Identity{}, fmt.Errorf("the token's pod %s/%s does not exist", r.Namespace, id.PodName)
	case string(id.Pod.UID) != id.PodUID:
		return etcdcluster.Identity{}, fmt.Errorf("the token was issued to an earlier pod %s/%s (UID %s); the pod of that name now has UID %s", r.Namespace, id.PodName, id.PodUID, id.Pod.UID)
	case id.Pod.DeletionTimestamp != nil:
		return etcdcluster.Identity{}, fmt.Errorf("the token's pod %s/%s is being deleted", r.Namespace, id.PodName)
	}
	owner := metav1.GetControllerOf(id.Pod)
	if owner == nil || owner.Kind != "StatefulSet" || owner.Name != r.StatefulSet || !strings.HasPrefix(owner.APIVersion, "apps/") {
		return etcdcluster.Identity{}, fmt.Errorf("the token's pod %s/%s is not controlled by the StatefulSet %s", r.Namespace, id.PodName, r.StatefulSet)
	}
	if etcdcluster.Ordinal(id.PodName) < 0 || !strings.HasPrefix(id.PodName, r.StatefulSet+"-") {
		return etcdcluster.Identity{}, fmt.Errorf("the token's pod %s/%s is not named <statefulset>-<ordinal>", r.Namespace, id.PodName)
	}
	out := etcdcluster.Identity{Name: id.PodName}
	for _, ip := range id.Pod.Status.PodIPs {
		out.IPs = append(out.IPs, ip.IP)
	}
	return out, nil
}

func orNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}

// PodTokenVerifier is the etcdcluster.IdentityVerifier of a cluster: it reviews a member's token with
// kube-apiserver (a TokenReview for MemberTokenAudience), reads the pod the token is bound to, and
// decides with DecidePodIdentity.
type PodTokenVerifier struct {
	Client kubernetes.Interface
	Rules  PodIdentityRules
}

// Verify implements etcdcluster.IdentityVerifier.
func (v *PodTokenVerifier) Verify(ctx context.Context, token string) (etcdcluster.Identity, error) {
	review, err := v.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{v.Rules.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		return etcdcluster.Identity{}, fmt.Errorf("reviewing the token: %w", err)
	}
	id := PodIdentity{
		Authenticated: review.Status.Authenticated, Error: review.Status.Error, Audiences: review.Status.Audiences,
		Username: review.Status.User.Username,
		PodName:  first(review.Status.User.Extra[extraPodName]), PodUID: first(review.Status.User.Extra[extraPodUID]),
	}
	if id.Authenticated && id.PodName != "" {
		pod, err := v.Client.CoreV1().Pods(v.Rules.Namespace).Get(ctx, id.PodName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return etcdcluster.Identity{}, fmt.Errorf("reading the token's pod: %w", err)
		default:
			id.Pod = pod
		}
	}
	return DecidePodIdentity(id, v.Rules)
}

func first(v authenticationv1.ExtraValue) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// TokenFileProof reads a member's proof from the projected token file at path at each call: kubelet
// replaces it before it expires.
func TokenFileProof(path string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("reading the member token: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
}
