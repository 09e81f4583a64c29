package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// verifySecret checks a delivered Secret: tls.crt verifies against ca.crt for the Service, and tls.key
// belongs to it. It returns the serial number.
func verifySecret(t *testing.T, s *corev1.Secret, svc, ns string) string {
	t.Helper()
	if s.Type != corev1.SecretTypeTLS {
		t.Fatalf("Secret type %q, want kubernetes.io/tls", s.Type)
	}
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		t.Fatal("tls.crt holds no PEM")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.Data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: svc + "." + ns + ".svc", Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Fatalf("tls.crt does not verify against ca.crt: %v", err)
	}
	if _, err := tlsKeyPair(s.Data["tls.crt"], s.Data["tls.key"]); err != nil {
		t.Fatalf("tls.key does not match tls.crt: %v", err)
	}
	return leaf.SerialNumber.Text(16)
}

func waitSecret(t *testing.T, kube kubernetes.Interface, ns, name string, ok func(*corev1.Secret) bool) *corev1.Secret {
	t.Helper()
	var got *corev1.Secret
	e2etest.Eventually(t, 60*time.Second, "Secret "+ns+"/"+name, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		got = s
		return len(s.Data["tls.crt"]) > 0 && (ok == nil || ok(s)), nil
	})
	return got
}

func waitReady(t *testing.T, c versioned.Interface, ns, name string, status metav1.ConditionStatus, reason string) *certapiv1alpha1.ServingCertRequest {
	t.Helper()
	var got *certapiv1alpha1.ServingCertRequest
	e2etest.Eventually(t, 60*time.Second, "request "+name+" Ready="+string(status)+" "+reason, func(ctx context.Context) (bool, error) {
		r, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = r
		cond := meta.FindStatusCondition(r.Status.Conditions, "Ready")
		return cond != nil && cond.Status == status && (reason == "" || cond.Reason == reason), nil
	})
	return got
}

func TestSecretDelivery(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.SecretNamespace(t, kube)

	req := e2etest.Request("web", "web")
	req.Spec.SecretName = "web-tls"
	req.Spec.KeyAlgorithm = certapiv1alpha1.KeyAlgorithmRSA2048
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := waitSecret(t, kube, ns, "web-tls", nil)
	first := verifySecret(t, s, "web", ns)
	if s.Labels["certapi.dev/managed"] != "true" || s.Annotations["certapi.dev/servingcertrequest"] != "web" {
		t.Errorf("Secret metadata: labels %v annotations %v", s.Labels, s.Annotations)
	}
	if len(s.OwnerReferences) != 0 {
		t.Errorf("Secret has owner references %v: deleting the request would delete it", s.OwnerReferences)
	}
	var byCertapi bool
	for _, m := range s.ManagedFields {
		byCertapi = byCertapi || m.Manager == "certapi"
	}
	if !byCertapi {
		t.Errorf("no managedFields entry for manager certapi: %+v", s.ManagedFields)
	}
	r := waitReady(t, c, ns, "web", metav1.ConditionTrue, "")
	if r.Status.SerialNumber != first {
		t.Errorf("status serial %s, Secret serial %s", r.Status.SerialNumber, first)
	}

	t.Run("deleted Secret is re-created", func(t *testing.T) {
		old, err := kube.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := kube.CoreV1().Secrets(ns).Delete(ctx, "web-tls", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		s := waitSecret(t, kube, ns, "web-tls", func(s *corev1.Secret) bool { return s.UID != old.UID })
		verifySecret(t, s, "web", ns)
		t.Logf("re-created after %s", time.Since(start).Round(time.Millisecond))
	})

	t.Run("deleting the request keeps the Secret", func(t *testing.T) {
		if err := c.CertapiV1alpha1().ServingCertRequests(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		e2etest.Eventually(t, 10*time.Second, "the request to be gone", func(ctx context.Context) (bool, error) {
			_, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "web", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if _, err := kube.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{}); err != nil {
			t.Fatalf("the Secret went with the request: %v", err)
		}
	})
}

func TestSecretRenewal(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.SecretNamespace(t, kube)
	req := e2etest.Request("fast", "fast")
	req.Spec.SecretName = "fast-tls"
	req.Spec.Duration = &metav1.Duration{Duration: time.Hour}
	req.Spec.RenewBefore = &metav1.Duration{Duration: time.Hour - 5*time.Second}
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var uid string
	e2etest.Eventually(t, 90*time.Second, "three certificates renewed in place", func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "fast-tls", metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && len(s.Data["tls.crt"]) == 0) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if uid == "" {
			uid = string(s.UID)
		} else if uid != string(s.UID) {
			t.Fatalf("the Secret was re-created (uid %s -> %s), not renewed in place", uid, s.UID)
		}
		seen[verifySecret(t, s, "fast", ns)] = true
		return len(seen) >= 3, nil
	})
}

func TestSecretConflicts(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.SecretNamespace(t, kube)

	foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "foreign"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("not ours"), "tls.key": []byte("not ours either")}}
	empty := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "empty"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": {}, "tls.key": {}}}
	opaque := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "opaque", Annotations: map[string]string{"certapi.dev/servingcertrequest": "to-opaque"}},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"x": []byte("y")}}
	before := map[string]*corev1.Secret{}
	for _, s := range []*corev1.Secret{foreign, empty, opaque} {
		created, err := kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before[s.Name] = created
	}
	claim := func(name, secret string) {
		r := e2etest.Request(name, name)
		r.Spec.SecretName = secret
		if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	claim("to-foreign", "foreign")
	claim("to-empty", "empty")
	claim("to-opaque", "opaque")
	// Two requests, one Secret: the first to claim it keeps it, the second is in conflict.
	claim("first", "shared")
	waitSecret(t, kube, ns, "shared", nil)
	claim("second", "shared")

	for _, name := range []string{"to-foreign", "to-empty", "to-opaque", "second"} {
		r := waitReady(t, c, ns, name, metav1.ConditionFalse, "SecretConflict")
		msg := meta.FindStatusCondition(r.Status.Conditions, "Ready").Message
		if !strings.Contains(msg, r.Spec.SecretName) {
			t.Errorf("%s: conflict message %q does not name the Secret", name, msg)
		}
	}
	waitReady(t, c, ns, "first", metav1.ConditionTrue, "")

	for name, b := range before {
		got, err := kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != b.ResourceVersion || !reflect.DeepEqual(got.Data, b.Data) || !reflect.DeepEqual(got.Annotations, b.Annotations) {
			t.Errorf("Secret %s was changed", name)
		}
	}
	shared, _ := kube.CoreV1().Secrets(ns).Get(ctx, "shared", metav1.GetOptions{})
	if shared.Annotations["certapi.dev/servingcertrequest"] != "first" {
		t.Errorf("shared Secret now claimed by %q", shared.Annotations["certapi.dev/servingcertrequest"])
	}

	// Each conflict is an Event on the request that names the Secret.
	e2etest.Eventually(t, 30*time.Second, "conflict Events", func(ctx context.Context) (bool, error) {
		evs, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		found := map[string]bool{}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && e.Reason == "SecretConflict" {
				found[e.Regarding.Name] = true
			}
		}
		return found["to-foreign"] && found["to-empty"] && found["to-opaque"] && found["second"], nil
	})

	// Handing the empty Secret over with the annotation lets certapi fill it.
	empty2 := before["empty"].DeepCopy()
	empty2.Annotations = map[string]string{"certapi.dev/servingcertrequest": "to-empty"}
	if _, err := kube.CoreV1().Secrets(ns).Update(ctx, empty2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := waitSecret(t, kube, ns, "empty", func(s *corev1.Secret) bool { return !bytes.Equal(s.Data["tls.crt"], nil) })
	verifySecret(t, s, "to-empty", ns)
}
