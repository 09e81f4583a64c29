package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestSpecChangesNeedRightsOnTheSecret: a change to a request's spec makes certapi re-issue the
// certificate in its Secret, so whoever makes it must be allowed to create and update that Secret
// themselves; a user who may update the request but not the Secret is refused, and the Secret is left
// as it was.
func TestSpecChangesNeedRightsOnTheSecret(t *testing.T) {
	ctx := context.Background()
	admin, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	deliveredRequest(t, admin, kube, ns, "r")
	before := waitSecret(t, kube, ns, "r-tls", nil)

	editor := serviceAccountConfig(t, kube, ns, "editor")
	subject := rbacv1.Subject{Kind: "ServiceAccount", Name: "editor", Namespace: ns}
	grant(t, kube, ns, "editor", subject,
		rbacv1.PolicyRule{APIGroups: []string{"certapi.dev"}, Resources: []string{"servingcertrequests"}, Verbs: []string{"get", "update", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}})
	ec, _ := testhelpers.Clients(t, editor)
	e2etest.Eventually(t, 30*time.Second, "the editor's Role to take effect", func(ctx context.Context) (bool, error) {
		_, err := ec.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "r", metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})

	// A new SAN with secretName unchanged: certapi would re-issue into r-tls. (Retried while certapi's
	// status writes make the update conflict.)
	var gen int64
	var err error
	e2etest.Eventually(t, 30*time.Second, "an update that does not conflict with certapi's status writes", func(ctx context.Context) (bool, error) {
		req, gerr := ec.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "r", metav1.GetOptions{})
		if gerr != nil {
			return false, gerr
		}
		gen = req.Generation
		req.Spec.DNSNames = []string{"extra." + ns + ".svc"}
		_, err = ec.CertapiV1alpha1().ServingCertRequests(ns).Update(ctx, req, metav1.UpdateOptions{})
		return !apierrors.IsConflict(err), nil
	})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "may not update secrets") || !strings.Contains(err.Error(), `"r-tls"`) {
		t.Fatalf("a spec change by a user who may not update the Secret: %v, want 403 that says why", err)
	}
	got, err := admin.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "r", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Generation != gen || len(got.Spec.DNSNames) != 0 {
		t.Fatalf("the refused change was stored: generation %d -> %d, dnsNames %v", gen, got.Generation, got.Spec.DNSNames)
	}
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, "r-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(s.Data["tls.crt"], before.Data["tls.crt"]) {
		t.Fatal("the Secret was re-issued after a refused change")
	}

	// With update on that Secret the same change is accepted and certapi re-issues into it.
	grant(t, kube, ns, "editor-secret", subject,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"update"}, ResourceNames: []string{"r-tls"}})
	e2etest.Eventually(t, 30*time.Second, "the change to be accepted once the editor may update the Secret", func(ctx context.Context) (bool, error) {
		req, err := ec.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "r", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		req.Spec.DNSNames = []string{"extra." + ns + ".svc"}
		_, err = ec.CertapiV1alpha1().ServingCertRequests(ns).Update(ctx, req, metav1.UpdateOptions{})
		if apierrors.IsForbidden(err) || apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	waitSecret(t, kube, ns, "r-tls", func(s *corev1.Secret) bool { return !bytes.Equal(s.Data["tls.crt"], before.Data["tls.crt"]) })
}

// TestSecretOfAnEarlierRequestIsAdopted: a Secret records the UID of the request it was delivered for.
// A new request of the same name, created after that one was deleted (or applied again after certapi's
// etcd data was lost), adopts the Secret: no request has the recorded UID any more, and names are unique
// in a namespace. certapi re-issues the Secret in place for the new request and records its UID.
func TestSecretOfAnEarlierRequestIsAdopted(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	deliveredRequest(t, c, kube, ns, "u")
	first := waitSecret(t, kube, ns, "u-tls", nil)
	firstReq, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "u", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := first.Annotations["certapi.dev/servingcertrequest-uid"]; got != string(firstReq.UID) {
		t.Fatalf("the Secret's annotation certapi.dev/servingcertrequest-uid is %q, want the request's UID %s", got, firstReq.UID)
	}

	if err := c.CertapiV1alpha1().ServingCertRequests(ns).Delete(ctx, "u", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 30*time.Second, "the request to be deleted", func(ctx context.Context) (bool, error) {
		_, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "u", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	again := e2etest.Request("u", "u")
	again.Spec.SecretName = "u-tls"
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := waitReady(t, c, ns, "u", metav1.ConditionTrue, "Issued")
	if r.UID == firstReq.UID {
		t.Fatal("control failed: the new request has the earlier one's UID")
	}
	s := waitSecret(t, kube, ns, "u-tls", func(s *corev1.Secret) bool {
		return s.Annotations["certapi.dev/servingcertrequest-uid"] == string(r.UID)
	})
	if s.UID != first.UID {
		t.Errorf("the Secret was replaced (UID %s -> %s), not adopted in place", first.UID, s.UID)
	}
	if bytes.Equal(s.Data["tls.crt"], first.Data["tls.crt"]) {
		t.Error("the adopted Secret keeps the earlier request's certificate; want one issued for the new request")
	}
	verifySecret(t, s, "u", ns)
}
