// Package servingcerttest_test runs the operator's test double, pkg/servingcert/servingcerttest, the
// way an operator's envtest-style test would: a real etcd and kube-apiserver (test/framework), no
// certapi server, a ValidatingWebhookConfiguration whose caBundle comes from the double, and a webhook
// HTTPS server whose certificate comes from a servingcert.Source on the double. kube-apiserver calls it,
// enforces its decision, and follows a CA rotation once the test moves the caBundle along.
package servingcerttest_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/servingcert"
	"github.com/certapi/certapi/pkg/servingcert/servingcerttest"
	"github.com/certapi/certapi/test/framework"
)

const (
	ns      = "my-system"
	svc     = "my-webhook"
	vwcName = "my-webhook.example.com"
)

// reviews records the AdmissionReviews the webhook answered.
type reviews struct {
	mu    sync.Mutex
	names []string
}

func (r *reviews) seen(name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.names {
		if n == name {
			return true
		}
	}
	return false
}

// handler is the operator's webhook: it denies ConfigMaps whose name starts with "deny-".
func (r *reviews) handler(w http.ResponseWriter, req *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(req.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "want an AdmissionReview", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.names = append(r.names, review.Request.Name)
	r.mu.Unlock()
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	if strings.HasPrefix(review.Request.Name, "deny-") {
		review.Response.Allowed = false
		review.Response.Result = &metav1.Status{Message: "denied by my-webhook"}
	}
	review.Request = nil
	_ = json.NewEncoder(w).Encode(review)
}

func TestWebhookServedFromTheDouble(t *testing.T) {
	cp := framework.StartT(t, framework.Options{SkipCertapi: true})
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The in-memory CA stands in for certapi: the ServingCertRequest the operator ships, and the
	// operator's own Source with Issuer set to the CA instead of a client.
	ca, err := servingcerttest.NewCA(servingcerttest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.AddRequest(&certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: svc},
		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc},
	}); err != nil {
		t.Fatal(err)
	}
	src, err := servingcert.New(servingcert.Options{Issuer: ca, Namespace: ns, Name: svc, CAChangeDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srcDone := make(chan struct{})
	go func() {
		defer close(srcDone)
		_ = src.Start(ctx)
	}()
	defer func() { cancel(); <-srcDone }()

	// The webhook server, as the operator runs it: TLS from the Source, listening before the
	// certificate exists.
	seen := &reviews{}
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", seen.handler)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", src.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if err := src.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	// kube-apiserver reaches <svc>.<ns>.svc through an ExternalName Service to localhost, and
	// verifies the server's certificate for that name against the configuration's caBundle.
	if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: port}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fail, none, path := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone, "/validate"
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: vwcName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: vwcName,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				Service:  &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svc, Path: &path, Port: &port},
				CABundle: ca.CABundle(), // what certapi's injector would write
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The client's create is rejected with the webhook's message, and the webhook saw the call.
	expectDenied(t, kube, "deny-first", "denied by my-webhook")
	if !seen.seen("deny-first") {
		t.Error("the webhook never saw deny-first")
	}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("allowed"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating an allowed ConfigMap: %v", err)
	}
	if !seen.seen("allowed") {
		t.Error("the webhook never saw the allowed ConfigMap")
	}

	// A rotation, as certapi runs one: the new CA is trusted first, then signs (the Source re-issues
	// at once), then the old one leaves the bundle. kube-apiserver keeps calling the webhook through
	// every step once the caBundle follows the CA's.
	old := ca.Active()
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"PublishNext", ca.PublishNext},
		{"Rotate", func() error {
			if err := ca.Rotate(); err != nil {
				return err
			}
			return ca.WaitServing(ctx, src)
		}},
		{"DropRetiring", func() error { ca.DropRetiring(); return nil }},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		setCABundle(t, kube, ca.CABundle())
		expectDenied(t, kube, "deny-after-"+strings.ToLower(step.name), "denied by my-webhook")
	}
	served, err := src.GetCertificate(nil)
	if err != nil || served.Leaf.CheckSignatureFrom(old) == nil {
		t.Fatalf("the webhook still serves a certificate of the old CA (%v)", err)
	}

	// What the caBundle guards against: a bundle without the CA that signs (here another CA's; a
	// bundle kube-apiserver used before would find its connection still open) makes kube-apiserver
	// refuse the webhook's certificate, and failurePolicy Fail rejects the create.
	other, err := servingcerttest.NewCA(servingcerttest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	setCABundle(t, kube, other.CABundle())
	expectDenied(t, kube, "wrong-bundle", "x509: certificate signed by unknown authority")
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// expectDenied creates ConfigMap name in ns until the create fails with an error containing want
// (kube-apiserver picks up a new or changed webhook configuration within about a second), for up to
// 30s. A create that succeeds meanwhile (before the configuration is active) is deleted again.
func expectDenied(t *testing.T, kube kubernetes.Interface, name, want string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(name), metav1.CreateOptions{})
		if last == nil {
			_ = kube.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{})
			return false, nil
		}
		return strings.Contains(last.Error(), want), nil
	})
	if err != nil {
		t.Fatalf("creating ConfigMap %s was never refused with %q; last answer: %v", name, want, last)
	}
}

// setCABundle writes bundle into the webhook configuration, as certapi's injector does.
func setCABundle(t *testing.T, kube kubernetes.Interface, bundle []byte) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cur, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vwcName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cur.Webhooks[0].ClientConfig.CABundle = bundle
		_, err = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, cur, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("updating the caBundle: %v", err)
	}
}
