package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/informers/externalversions"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

func TestServingCertRequestLifecycle(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	scrs := c.CertapiV1alpha1().ServingCertRequests(ns)

	w, err := scrs.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()

	created, err := scrs.Create(ctx, e2etest.Request("webhook", "webhook"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	// Defaults are applied by the server; renewBefore stays unset.
	if got := created.Spec.Duration; got == nil || got.Duration != 168*time.Hour {
		t.Errorf("default duration = %v, want 168h", got)
	}
	if created.Spec.KeyAlgorithm != certapiv1alpha1.KeyAlgorithmECDSAP256 {
		t.Errorf("default keyAlgorithm = %q, want ECDSAP256", created.Spec.KeyAlgorithm)
	}
	if created.Spec.RenewBefore != nil {
		t.Errorf("renewBefore = %v, want unset", created.Spec.RenewBefore)
	}
	if created.Generation != 1 {
		t.Errorf("generation = %d, want 1", created.Generation)
	}

	got, err := scrs.Get(ctx, "webhook", metav1.GetOptions{})
	if err != nil || got.UID != created.UID {
		t.Fatalf("get: %v (uid %v, want %v)", err, got.UID, created.UID)
	}
	list, err := scrs.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list: %v, %d items", err, len(list.Items))
	}
	// Field selectors find the request behind a Service.
	sel, err := scrs.List(ctx, metav1.ListOptions{FieldSelector: "spec.serviceName=webhook"})
	if err != nil || len(sel.Items) != 1 {
		t.Fatalf("list by spec.serviceName: %v, %d items", err, len(sel.Items))
	}

	got.Spec.DNSNames = []string{"Extra." + ns + ".SVC."}
	updated, err := scrs.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if want := "extra." + ns + ".svc"; len(updated.Spec.DNSNames) != 1 || updated.Spec.DNSNames[0] != want {
		t.Errorf("dnsNames = %v, want [%s] (normalised)", updated.Spec.DNSNames, want)
	}
	if updated.Generation != 2 {
		t.Errorf("generation after a spec change = %d, want 2", updated.Generation)
	}

	if err := scrs.Delete(ctx, "webhook", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := scrs.Get(ctx, "webhook", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want NotFound", err)
	}

	// The watch saw the whole life.
	var types []watch.EventType
	deadline := time.After(30 * time.Second)
	for len(types) < 3 {
		select {
		case ev := <-w.ResultChan():
			types = append(types, ev.Type)
		case <-deadline:
			t.Fatalf("watch events so far %v, want ADDED, MODIFIED, DELETED", types)
		}
	}
	if types[0] != watch.Added || types[1] != watch.Modified || types[2] != watch.Deleted {
		t.Fatalf("watch events %v, want ADDED, MODIFIED, DELETED", types)
	}
}

func TestInformersAndListers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)

	factory := externalversions.NewSharedInformerFactoryWithOptions(c, 0, externalversions.WithNamespace(ns))
	informer := factory.Certapi().V1alpha1().ServingCertRequests()
	lister := informer.Lister()
	informer.Informer() // register before Start
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), informer.Informer().HasSynced) {
		t.Fatal("informer did not sync")
	}
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("a", "svc-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 30*time.Second, "the lister to see the request", func(context.Context) (bool, error) {
		got, err := lister.ServingCertRequests(ns).Get("a")
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && got.Spec.ServiceName == "svc-a", err
	})
}

func TestStatusSubresource(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	scrs := c.CertapiV1alpha1().ServingCertRequests(ns)

	obj, err := scrs.Create(ctx, e2etest.Request("s", "svc"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A create cannot set status.
	withStatus := e2etest.Request("t", "svc")
	withStatus.Status.SerialNumber = "abc"
	created, err := scrs.Create(ctx, withStatus, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Status.SerialNumber != "" {
		t.Errorf("create set status.serialNumber = %q", created.Status.SerialNumber)
	}

	// A status write changes status only.
	obj.Status.SerialNumber = "0a1b"
	obj.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Pending", Message: "test", LastTransitionTime: metav1.Now()}}
	obj.Spec.ServiceName = "changed-by-status"
	st, err := scrs.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	if st.Status.SerialNumber != "0a1b" || st.Spec.ServiceName != "svc" {
		t.Errorf("after a status write: serial %q (want 0a1b), serviceName %q (want svc)", st.Status.SerialNumber, st.Spec.ServiceName)
	}

	// A spec write changes spec only.
	st.Spec.ServiceName = "svc2"
	st.Status.SerialNumber = "ffff"
	sp, err := scrs.Update(ctx, st, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if sp.Spec.ServiceName != "svc2" || sp.Status.SerialNumber != "0a1b" {
		t.Errorf("after a spec write: serviceName %q (want svc2), serial %q (want 0a1b)", sp.Spec.ServiceName, sp.Status.SerialNumber)
	}

	// Status validation runs too.
	sp.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: "Maybe", Reason: "x", LastTransitionTime: metav1.Now()}}
	if _, err := scrs.UpdateStatus(ctx, sp, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("invalid condition status: got %v, want 422", err)
	}
}

func TestCertificateAuthorityIsSingleAndUndeletable(t *testing.T) {
	ctx := context.Background()
	c, _ := testhelpers.Clients(t, cp.AdminConfig)
	cas := c.CertapiV1alpha1().CertificateAuthorities()

	_, err := cas.Create(ctx, &certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "second"}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), `only the name "default" is accepted`) {
		t.Fatalf("creating CertificateAuthority/second: %v, want 422 naming \"default\"", err)
	}
	ca, err := cas.Get(ctx, "default", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		ca, err = cas.Create(ctx, &certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("getting or creating CertificateAuthority/default: %v", err)
	}
	if ca.Spec.Duration == nil || ca.Spec.Duration.Duration != 8760*time.Hour {
		t.Errorf("default CA duration = %v, want 8760h", ca.Spec.Duration)
	}
	err = cas.Delete(ctx, "default", metav1.DeleteOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "cannot be deleted") {
		t.Fatalf("delete: %v, want 403 that says it cannot be deleted", err)
	}
	err = cas.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("deletecollection: %v, want 403", err)
	}
	if _, err := cas.Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("CertificateAuthority/default is gone: %v", err)
	}
}

func TestDelegatedAuthorization(t *testing.T) {
	ctx := context.Background()
	_, kube := testhelpers.Clients(t, cp.AdminConfig)
	mine := e2etest.Namespace(t, kube)
	other := e2etest.Namespace(t, kube)

	cfg, err := cp.UserConfig("alice")
	if err != nil {
		t.Fatal(err)
	}
	alice, _ := testhelpers.Clients(t, cfg)

	// No RBAC at all: 403.
	_, err = alice.CertapiV1alpha1().ServingCertRequests(mine).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("list with no RBAC: %v, want 403", err)
	}

	// A Role in one namespace grants that namespace only.
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "scr-editor"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"certapi.dev"}, Resources: []string{"servingcertrequests"},
			Verbs: []string{"get", "list", "watch", "create", "update", "delete"},
		}},
	}
	if _, err := kube.RbacV1().Roles(mine).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "alice"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "scr-editor"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "alice"}},
	}
	if _, err := kube.RbacV1().RoleBindings(mine).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 30*time.Second, "alice's Role to take effect", func(ctx context.Context) (bool, error) {
		_, err := alice.CertapiV1alpha1().ServingCertRequests(mine).Create(ctx, e2etest.Request("mine", "svc"), metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	_, err = alice.CertapiV1alpha1().ServingCertRequests(other).Create(ctx, e2etest.Request("theirs", "svc"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("create in another namespace: %v, want 403", err)
	}
	_, err = alice.CertapiV1alpha1().ServingCertRequests(other).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("list in another namespace: %v, want 403", err)
	}
	// Status is a separate resource for RBAC: the Role above does not grant it.
	obj, err := alice.CertapiV1alpha1().ServingCertRequests(mine).Get(ctx, "mine", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = alice.CertapiV1alpha1().ServingCertRequests(mine).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	var status apierrors.APIStatus
	if !apierrors.IsForbidden(err) || !errors.As(err, &status) {
		t.Fatalf("update status without servingcertrequests/status: %v, want 403", err)
	}
}
