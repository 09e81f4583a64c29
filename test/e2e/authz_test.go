package e2e

import (
	"context"
	"crypto/elliptic"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// grant creates a Role with rules in ns and binds subject to it.
func grant(t *testing.T, kube kubernetes.Interface, ns, name string, subject rbacv1.Subject, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// serviceAccountConfig returns a client config that authenticates as a new ServiceAccount in ns.
func serviceAccountConfig(t *testing.T, kube kubernetes.Interface, ns, name string) *rest.Config {
	t.Helper()
	return serviceAccountConfigOn(t, cp, kube, ns, name)
}

// serviceAccountConfigOn returns a client config for own's kube-apiserver that authenticates as a new
// ServiceAccount in ns; kube is an admin client of the same control plane.
func serviceAccountConfigOn(t *testing.T, own *framework.ControlPlane, kube kubernetes.Interface, ns, name string) *rest.Config {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", ns, name, err)
	}
	cfg := rest.AnonymousClientConfig(own.AdminConfig)
	cfg.BearerToken = tok.Status.Token
	return cfg
}

func ptr[T any](v T) *T { return &v }

func TestServingCertsAuthorization(t *testing.T) {
	ctx := context.Background()
	admin, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.SecretNamespace(t, kube)
	for _, n := range []string{"a", "b"} {
		if _, err := admin.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request(n, "svc-"+n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	csr := signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256()))
	issue(t, ns, "a", e2etest.ServingCert(csr, nil)) // the leader is up

	// The webhook's ServiceAccount may issue for its own request, named, and nothing else.
	webhook := serviceAccountConfig(t, kube, ns, "webhook")
	grant(t, kube, ns, "webhook-cert", rbacv1.Subject{Kind: "ServiceAccount", Name: "webhook", Namespace: ns},
		rbacv1.PolicyRule{APIGroups: []string{"certapi.dev"}, Resources: []string{"servingcertrequests/servingcerts"}, Verbs: []string{"create"}, ResourceNames: []string{"a"}})
	wc, _ := testhelpers.Clients(t, webhook)
	e2etest.Eventually(t, 30*time.Second, "the webhook's Role to take effect", func(ctx context.Context) (bool, error) {
		_, err := wc.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "a", e2etest.ServingCert(csr, nil), metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	_, err := wc.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "b", e2etest.ServingCert(csr, nil), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("issuing for b with resourceNames [a]: %v, want 403", err)
	}

	// create servingcertrequests does not grant the subresource.
	writer := serviceAccountConfig(t, kube, ns, "writer")
	grant(t, kube, ns, "writer", rbacv1.Subject{Kind: "ServiceAccount", Name: "writer", Namespace: ns},
		rbacv1.PolicyRule{APIGroups: []string{"certapi.dev"}, Resources: []string{"servingcertrequests"}, Verbs: []string{"create", "get"}})
	writerClient, _ := testhelpers.Clients(t, writer)
	e2etest.Eventually(t, 30*time.Second, "the writer's Role to take effect", func(ctx context.Context) (bool, error) {
		_, err := writerClient.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "a", metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	_, err = writerClient.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "a", e2etest.ServingCert(csr, nil), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("issuing with only create servingcertrequests: %v, want 403", err)
	}

	// Setting secretName needs create and update on that Secret: the writer lacks both.
	withSecret := e2etest.Request("with-secret", "svc")
	withSecret.Spec.SecretName = "svc-tls"
	_, err = writerClient.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, withSecret, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may not create secrets") {
		t.Fatalf("secretName without create secrets: %v, want 403 that says why", err)
	}
	if _, err := admin.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "with-secret", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused request was stored: %v", err)
	}
	// Once it may create and update that Secret, the same request is accepted.
	grant(t, kube, ns, "writer-secrets", rbacv1.Subject{Kind: "ServiceAccount", Name: "writer", Namespace: ns},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"update"}, ResourceNames: []string{"svc-tls"}})
	e2etest.Eventually(t, 30*time.Second, "secretName to be accepted once the writer may create and update the Secret", func(ctx context.Context) (bool, error) {
		_, err := writerClient.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, withSecret, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
}
