package secretdelivery

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	k8stesting "k8s.io/client-go/testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/signer"
)

func keyFor(req *certapiv1alpha1.ServingCertRequest) types.NamespacedName {
	return types.NamespacedName{Namespace: req.Namespace, Name: req.Name}
}

func getSecret(t *testing.T, h *harness, name string) *corev1.Secret {
	t.Helper()
	s, err := h.kube.CoreV1().Secrets(testNamespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting Secret %s: %v", name, err)
	}
	return s
}

// runStatus runs the status writer until the test ends.
func runStatus(t *testing.T, h *harness) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = h.status.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitReady waits until the request's Ready condition in the API has the reason and, when serial is not
// empty, its status names that serial.
func waitReady(t *testing.T, h *harness, req *certapiv1alpha1.ServingCertRequest, reason string, serial ...string) *certapiv1alpha1.ServingCertRequest {
	t.Helper()
	var got *certapiv1alpha1.ServingCertRequest
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := h.certapi.CertapiV1alpha1().ServingCertRequests(req.Namespace).Get(ctx, req.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = r
		cond := readyCondition(r)
		return cond != nil && cond.Reason == reason && (len(serial) == 0 || r.Status.SerialNumber == serial[0]), nil
	})
	if err != nil {
		t.Fatalf("Ready reason %s (serial %v) not written: %v; last %+v", reason, serial, err, got)
	}
	return got
}

// noKeyMaterial fails if any text holds private key material.
func noKeyMaterial(t *testing.T, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if strings.Contains(s, "PRIVATE KEY") || strings.Contains(s, keyMarkerPrefix) {
			t.Errorf("key material in %q", s)
		}
	}
}

func TestSyncCreatesSecret(t *testing.T) {
	h := newHarness(t)
	runStatus(t, h)
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	req.Spec.DNSNames = []string{"*.webhook-svc.webhooks.svc"}
	if _, err := h.certapi.CertapiV1alpha1().ServingCertRequests(testNamespace).Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.addRequest(t, req)

	h.kube.ClearActions()
	res, _, err := h.c.syncRequest(context.Background(), keyFor(req))
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	// A new request's Secret, not in the cache, is taken for absent: created without a read first.
	var verbs []string
	for _, a := range h.kube.Actions() {
		if a.GetResource().Resource == "secrets" {
			verbs = append(verbs, a.GetVerb())
		}
	}
	if !reflect.DeepEqual(verbs, []string{"create"}) {
		t.Errorf("requests for the Secret %v; want one create, no read", verbs)
	}
	s := getSecret(t, h, "webhook-tls")
	if s.Type != corev1.SecretTypeTLS {
		t.Errorf("type %q; want kubernetes.io/tls", s.Type)
	}
	if s.Labels[certapiv1alpha1.LabelManaged] != "true" {
		t.Errorf("labels %v; want %s=true", s.Labels, certapiv1alpha1.LabelManaged)
	}
	if len(s.OwnerReferences) != 0 {
		t.Errorf("owner references %v; want none (deleting the request must leave the Secret)", s.OwnerReferences)
	}
	for _, name := range []string{"webhook-svc.webhooks.svc", "webhook-svc.webhooks.svc.cluster.local", "pod-0.webhook-svc.webhooks.svc"} {
		verifyServing(t, s, name, testNow)
	}
	cert := verifyServing(t, s, "webhook-svc.webhooks.svc", testNow)
	if string(s.Data[certapiv1alpha1.SecretKeyCABundle]) != string(h.bundle) {
		t.Errorf("ca.crt is not the Authority's bundle")
	}
	serial := signer.FormatSerialNumber(cert.SerialNumber)
	wantAnn := map[string]string{
		certapiv1alpha1.AnnotationServingCertRequest: "webhook",
		certapiv1alpha1.AnnotationSerialNumber:       serial,
		certapiv1alpha1.AnnotationNotAfter:           cert.NotAfter.UTC().Format(time.RFC3339),
		certapiv1alpha1.AnnotationGeneration:         "1",
	}
	for k, v := range wantAnn {
		if s.Annotations[k] != v {
			t.Errorf("annotation %s = %q; want %q", k, s.Annotations[k], v)
		}
	}
	renewAt, err := time.Parse(time.RFC3339, s.Annotations[certapiv1alpha1.AnnotationRenewalTime])
	if err != nil {
		t.Fatalf("annotation %s: %v", certapiv1alpha1.AnnotationRenewalTime, err)
	}
	// Two thirds of the lifetime counted from issuance (the backdated minutes do not count).
	if want := testNow.Add(cert.NotAfter.Sub(testNow) / 3 * 2); renewAt.Sub(want).Abs() > time.Second {
		t.Errorf("renewal time %s; want two thirds of the lifetime from issuance, %s", renewAt, want)
	}
	if res.After != renewAt.Sub(testNow) {
		t.Errorf("requeued after %s; want exactly until the renewal time, %s", res.After, renewAt.Sub(testNow))
	}
	if got := h.secretWrites(); !reflect.DeepEqual(got, []string{"create"}) {
		t.Errorf("Secret writes %v; want one create", got)
	}
	for _, a := range h.kube.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "secrets" {
			if fm := a.(interface{ GetCreateOptions() metav1.CreateOptions }).GetCreateOptions().FieldManager; fm != certapiv1alpha1.FieldManager {
				t.Errorf("field manager %q; want %q", fm, certapiv1alpha1.FieldManager)
			}
		}
	}

	evs := h.events()
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal Issued IssueCertificate") || !strings.Contains(evs[0], serial) ||
		!strings.Contains(evs[0], "kind=ServingCertRequest,apiVersion=certapi.dev/v1alpha1") {
		t.Errorf("events %q; want one Normal Issued naming serial %s regarding the ServingCertRequest", evs, serial)
	}
	if len(h.authority.issuedFor()) != 1 || h.authority.issuedFor()[0] != "webhooks/webhook" {
		t.Errorf("OnIssued calls %v", h.authority.issuedFor())
	}

	got := waitReady(t, h, req, status.ReasonIssued, serial)
	if got.Status.Certificate != string(s.Data[corev1.TLSCertKey]) || got.Status.CABundle != string(h.bundle) ||
		!got.Status.RenewalTime.Time.Equal(renewAt) {
		t.Errorf("status %+v does not describe the delivered certificate", got.Status)
	}
	cond := readyCondition(got)
	noKeyMaterial(t, append(evs, cond.Message, got.Status.Certificate)...)

	// A second sync sees a current certificate and writes nothing.
	h.cacheSecret(t, s)
	res, _, err = h.c.syncRequest(context.Background(), keyFor(req))
	if err != nil || res.After != renewAt.Sub(testNow) {
		t.Errorf("second sync: %+v, %v", res, err)
	}
	if got := h.secretWrites(); len(got) != 1 {
		t.Errorf("Secret writes after a second sync %v; want still one", got)
	}
}

// TestSyncRecordsTheRequestUID: a current Secret that names its request but not the request's UID (one
// written before certapi recorded UIDs) gets the UID in one patch of that annotation, guarded by its
// resourceVersion, and keeps its certificate.
func TestSyncRecordsTheRequestUID(t *testing.T) {
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	h := newHarness(t)
	s := deliveredSecret(t, req, h.ca, h.bundle, testNow)
	delete(s.Annotations, certapiv1alpha1.AnnotationServingCertRequestUID)
	if err := h.kube.Tracker().Add(s); err != nil {
		t.Fatal(err)
	}
	h.addRequest(t, req)
	h.cacheSecret(t, s)

	res, _, err := h.c.syncRequest(context.Background(), keyFor(req))
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	if got := h.secretWrites(); !reflect.DeepEqual(got, []string{"patch"}) {
		t.Fatalf("Secret writes %v; want one patch", got)
	}
	for _, a := range h.kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			want := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q},"resourceVersion":%q}}`, certapiv1alpha1.AnnotationServingCertRequestUID, req.UID, s.ResourceVersion)
			if string(p.GetPatch()) != want {
				t.Errorf("patch %s; want %s", p.GetPatch(), want)
			}
		}
	}
	got := getSecret(t, h, "webhook-tls")
	if got.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID] != string(req.UID) || string(got.Data[corev1.TLSCertKey]) != string(s.Data[corev1.TLSCertKey]) {
		t.Errorf("Secret after the sync: UID %q, same certificate %v", got.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID],
			string(got.Data[corev1.TLSCertKey]) == string(s.Data[corev1.TLSCertKey]))
	}
	renewAt, _ := time.Parse(time.RFC3339, s.Annotations[certapiv1alpha1.AnnotationRenewalTime])
	if res.After != renewAt.Sub(testNow) {
		t.Errorf("requeued after %s; want until the renewal time", res.After)
	}
}

// TestSyncAdoptsTheSecretOfALostRequest: a Secret delivered for an earlier request of the same name (its
// UID recorded), which no longer exists (deleted and created again, or lost with certapi's etcd data), is
// adopted by the request of that name: re-issued in place from the Active CA, with the request's UID
// recorded, although its certificate was not due. A Secret that records the UID of a request that does
// exist stays untouched (SecretConflict).
func TestSyncAdoptsTheSecretOfALostRequest(t *testing.T) {
	for _, tc := range []struct {
		name      string
		liveOwner bool // a request with the recorded UID exists
	}{
		{name: "the recorded request is gone: adopted"},
		{name: "the recorded request exists: conflict", liveOwner: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newRequest("webhook", "webhook-svc", "webhook-tls")
			h := newHarness(t)
			lost := req.DeepCopy()
			lost.UID = "uid-of-the-lost-webhook"
			s := deliveredSecret(t, lost, h.ca, h.bundle, testNow)
			if err := h.kube.Tracker().Add(s); err != nil {
				t.Fatal(err)
			}
			h.addRequest(t, req)
			if tc.liveOwner {
				owner := newRequest("owner", "owner-svc", "owner-tls")
				owner.UID = lost.UID
				h.addRequest(t, owner)
			}
			h.cacheSecret(t, s)

			if _, _, err := h.c.syncRequest(context.Background(), keyFor(req)); err != nil {
				t.Fatalf("sync: %v", err)
			}
			got := getSecret(t, h, "webhook-tls")
			if tc.liveOwner {
				if w := h.secretWrites(); len(w) != 0 {
					t.Errorf("Secret writes %v; want none", w)
				}
				if got.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID] != string(lost.UID) {
					t.Errorf("the recorded UID changed to %q", got.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID])
				}
				if evs := h.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning SecretConflict") || !strings.Contains(evs[0], "which exists") {
					t.Errorf("events %q; want one Warning SecretConflict saying the recorded request exists", evs)
				}
				return
			}
			if w := h.secretWrites(); len(w) != 1 {
				t.Fatalf("Secret writes %v; want one", w)
			}
			if got.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID] != string(req.UID) {
				t.Errorf("the Secret records UID %q; want the adopting request's %s", got.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID], req.UID)
			}
			if string(got.Data[corev1.TLSCertKey]) == string(s.Data[corev1.TLSCertKey]) {
				t.Error("the adopted Secret keeps the lost request's certificate; want one issued for the adopting request")
			}
			verifyServing(t, got, "webhook-svc.webhooks.svc", testNow)
		})
	}
}

func TestSyncKeyAlgorithms(t *testing.T) {
	for _, alg := range []certapiv1alpha1.KeyAlgorithm{certapiv1alpha1.KeyAlgorithmECDSAP384, certapiv1alpha1.KeyAlgorithmRSA2048} {
		t.Run(string(alg), func(t *testing.T) {
			h := newHarness(t)
			req := newRequest("webhook", "webhook-svc", "webhook-tls")
			req.Spec.KeyAlgorithm = alg
			h.addRequest(t, req)
			if _, _, err := h.c.syncRequest(context.Background(), keyFor(req)); err != nil {
				t.Fatalf("sync: %v", err)
			}
			s := getSecret(t, h, "webhook-tls")
			verifyServing(t, s, "webhook-svc.webhooks.svc", testNow)
			key, err := signer.ParseKeyPEM(s.Data[corev1.TLSPrivateKeyKey])
			if err != nil {
				t.Fatal(err)
			}
			want := map[certapiv1alpha1.KeyAlgorithm]string{
				certapiv1alpha1.KeyAlgorithmECDSAP384: "*ecdsa.PrivateKey",
				certapiv1alpha1.KeyAlgorithmRSA2048:   "*rsa.PrivateKey",
			}[alg]
			if got := reflect.TypeOf(key).String(); got != want {
				t.Errorf("key type %s; want %s", got, want)
			}
		})
	}
}

// TestSyncConflictLeavesSecretUntouched: every kind of conflict leaves the Secret byte for byte as it was,
// reports Ready=False SecretConflict and a Warning Event once, and backs off instead of looping.
func TestSyncConflictLeavesSecretUntouched(t *testing.T) {
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "webhook-tls", ResourceVersion: "7",
			Labels: map[string]string{"app": "mine"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: []byte("their cert"), corev1.TLSPrivateKeyKey: []byte("their key")},
	}
	wrongType := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "webhook-tls", ResourceVersion: "7",
			Annotations: map[string]string{certapiv1alpha1.AnnotationServingCertRequest: "webhook"}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"password": []byte("hunter2")},
	}
	tests := []struct {
		name    string
		secret  *corev1.Secret
		cached  bool // a certapi Secret (in the cache) rather than one read directly
		message string
	}{
		{"conflict-foreign", foreign, false, `Secret "webhook-tls" exists and was not created by certapi; delete it, or annotate it certapi.dev/servingcertrequest=webhook to hand it over`},
		{"conflict-type", wrongType, false, `Secret "webhook-tls" has type Opaque`},
		{"conflict-other-request", nil, true, `Secret "webhook-tls" is delivered to by ServingCertRequest "other"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			secret := tt.secret
			if secret == nil {
				ca := newTestCA(t, testNow.Add(-time.Hour))
				other := newRequest("other", "other-svc", "webhook-tls")
				secret = deliveredSecret(t, other, ca, signer.EncodeBundle(ca.Certificate), testNow)
			}
			h := newHarness(t, secret.DeepCopy())
			runStatus(t, h)
			req := newRequest("webhook", "webhook-svc", "webhook-tls")
			if _, err := h.certapi.CertapiV1alpha1().ServingCertRequests(testNamespace).Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			h.addRequest(t, req)
			if tt.cached {
				h.cacheSecret(t, secret)
			}
			before := getSecret(t, h, "webhook-tls")

			for i := range 3 {
				res, conflict, err := h.c.syncRequest(context.Background(), keyFor(req))
				if err != nil {
					t.Fatalf("sync %d: %v", i, err)
				}
				// No timer: the cache (a certapi Secret) or a watch of the Secret wakes the request.
				if conflict || res.After != 0 {
					t.Errorf("sync %d: result %+v, conflict backoff %t; want neither", i, res, conflict)
				}
			}
			if n, want := h.c.conflicts.active(), map[bool]int{false: 1, true: 0}[tt.cached]; n != want {
				t.Errorf("%d Secrets watched; want %d (only a Secret not in the cache)", n, want)
			}
			if after := getSecret(t, h, "webhook-tls"); !reflect.DeepEqual(before, after) {
				t.Errorf("Secret changed:\nbefore %+v\nafter  %+v", before, after)
			}
			// A new request takes a Secret the cache does not hold for absent (mayAssumeAbsent): the first
			// sync's create fails on it, and every later look reads it first. A certapi Secret is in the
			// cache and is never written to.
			var wantWrites []string
			wantSigned := 0
			if !tt.cached {
				wantWrites, wantSigned = []string{"create"}, 1
			}
			if w := h.secretWrites(); !reflect.DeepEqual(w, wantWrites) {
				t.Errorf("Secret writes %v; want %v (a create that fails, on a Secret not in the cache)", w, wantWrites)
			}
			evs := h.events()
			if len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning SecretConflict") || !strings.Contains(evs[0], tt.message) {
				t.Errorf("events %q; want one Warning SecretConflict with %q", evs, tt.message)
			}
			got := waitReady(t, h, req, status.ReasonSecretConflict)
			cond := readyCondition(got)
			if cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, tt.message) {
				t.Errorf("Ready %+v; want False with %q", cond, tt.message)
			}
			noKeyMaterial(t, append(evs, cond.Message)...)
			if n := len(h.authority.issuedFor()); n != wantSigned {
				t.Errorf("%d certificates signed for a conflict; want %d (the one the failed create carried, never delivered)", n, wantSigned)
			}
		})
	}
}

// TestSyncConflictResolved: once the foreign Secret is deleted, the next sync creates certapi's.
func TestSyncConflictResolved(t *testing.T) {
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "webhook-tls"},
		Type:       corev1.SecretTypeTLS,
	}
	h := newHarness(t, foreign)
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	h.addRequest(t, req)
	if _, conflict, _ := h.c.syncRequest(context.Background(), keyFor(req)); !conflict {
		t.Fatalf("want a conflict first")
	}
	if err := h.kube.CoreV1().Secrets(testNamespace).Delete(context.Background(), "webhook-tls", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if res, conflict, err := h.c.syncRequest(context.Background(), keyFor(req)); err != nil || conflict {
		t.Fatalf("after deleting the foreign Secret: %+v, %v", res, err)
	}
	verifyServing(t, getSecret(t, h, "webhook-tls"), "webhook-svc.webhooks.svc", testNow)
}

// TestSyncAdoptsAnnotatedSecret: a Secret shipped empty by a Helm chart, annotated for the request, is filled
// in place; what the chart put there besides stays.
func TestSyncAdoptsAnnotatedSecret(t *testing.T) {
	shipped := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "webhook-tls", ResourceVersion: "5",
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{certapiv1alpha1.AnnotationServingCertRequest: "webhook", "meta.helm.sh/release-name": "webhook"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: {}, corev1.TLSPrivateKeyKey: {}, "extra": []byte("kept")},
	}
	h := newHarness(t, shipped)
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	h.addRequest(t, req)
	if _, _, err := h.c.syncRequest(context.Background(), keyFor(req)); err != nil {
		t.Fatalf("sync: %v", err)
	}
	s := getSecret(t, h, "webhook-tls")
	verifyServing(t, s, "webhook-svc.webhooks.svc", testNow)
	if s.Labels["app.kubernetes.io/managed-by"] != "Helm" || s.Labels[certapiv1alpha1.LabelManaged] != "true" ||
		s.Annotations["meta.helm.sh/release-name"] != "webhook" || string(s.Data["extra"]) != "kept" {
		t.Errorf("adopted Secret lost the chart's metadata or data, or lacks the label: %+v %+v %v", s.Labels, s.Annotations, s.Data["extra"])
	}
	// The new request took the Secret for absent: its create failed, and it was read and patched in the
	// same sync.
	if w := h.secretWrites(); !reflect.DeepEqual(w, []string{"create", "patch"}) {
		t.Errorf("Secret writes %v; want a failed create, then one patch", w)
	}
	if evs := h.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal Issued") {
		t.Errorf("events %q; want one Normal Issued", evs)
	}
}

// TestSyncRenewsInPlace: at the renewal time, and when the CA bundle changes, the certificate is replaced in
// the same Secret.
func TestSyncRenewsInPlace(t *testing.T) {
	h := newHarness(t)
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	h.addRequest(t, req)
	if _, _, err := h.c.syncRequest(context.Background(), keyFor(req)); err != nil {
		t.Fatal(err)
	}
	first := getSecret(t, h, "webhook-tls")
	h.cacheSecret(t, first)
	h.events()

	renewAt, _ := time.Parse(time.RFC3339, first.Annotations[certapiv1alpha1.AnnotationRenewalTime])
	h.clock.SetTime(renewAt)
	res, _, err := h.c.syncRequest(context.Background(), keyFor(req))
	if err != nil {
		t.Fatalf("renewal sync: %v", err)
	}
	second := getSecret(t, h, "webhook-tls")
	cert := verifyServing(t, second, "webhook-svc.webhooks.svc", renewAt)
	if second.Annotations[certapiv1alpha1.AnnotationSerialNumber] == first.Annotations[certapiv1alpha1.AnnotationSerialNumber] {
		t.Errorf("serial unchanged after renewal")
	}
	if !cert.NotBefore.Before(renewAt) || cert.NotAfter.Sub(renewAt) < certapiv1alpha1.DefaultDuration-time.Second {
		t.Errorf("renewed certificate valid %s..%s; want a fresh one from %s", cert.NotBefore, cert.NotAfter, renewAt)
	}
	newRenew, _ := time.Parse(time.RFC3339, second.Annotations[certapiv1alpha1.AnnotationRenewalTime])
	if res.After != newRenew.Sub(renewAt) || res.After <= 0 {
		t.Errorf("requeued after %s; want %s", res.After, newRenew.Sub(renewAt))
	}
	if w := h.secretWrites(); !reflect.DeepEqual(w, []string{"create", "patch"}) {
		t.Errorf("Secret writes %v; want create then patch", w)
	}
	evs := h.events()
	if len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal Renewed RenewCertificate") || !strings.Contains(evs[0], second.Annotations[certapiv1alpha1.AnnotationSerialNumber]) {
		t.Errorf("events %q; want one Normal Renewed with the new serial", evs)
	}

	// CA rotation: the bundle gains the Next CA; the Secret is re-issued with the new bundle.
	h.cacheSecret(t, second)
	next := newTestCA(t, testNow)
	h.authority.set(h.ca, signer.EncodeBundle(h.ca.Certificate, next.Certificate), true)
	if _, _, err := h.c.syncRequest(context.Background(), keyFor(req)); err != nil {
		t.Fatalf("bundle sync: %v", err)
	}
	third := getSecret(t, h, "webhook-tls")
	if string(third.Data[certapiv1alpha1.SecretKeyCABundle]) != string(signer.EncodeBundle(h.ca.Certificate, next.Certificate)) {
		t.Errorf("ca.crt not updated to the new bundle")
	}
	if evs := h.events(); len(evs) != 1 || !strings.Contains(evs[0], "CA bundle changed") {
		t.Errorf("events %q; want one saying the CA bundle changed", evs)
	}
}

// TestSyncStaleCacheDoesNotOverwrite: a patch carries the resourceVersion decide saw and only certapi's
// fields, so kube-apiserver refuses it when the Secret changed meanwhile. The fake clientset does not check
// resourceVersion on patches; a reactor does here as kube-apiserver would.
func TestSyncStaleCacheDoesNotOverwrite(t *testing.T) {
	h := newHarness(t)
	var patchedRV string
	var patchKeys, dataKeys []string
	h.kube.PrependReactor("patch", "secrets", func(action k8stesting.Action) (bool, runtime.Object, error) {
		pa := action.(k8stesting.PatchAction)
		var p struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
			Data map[string]json.RawMessage `json:"data"`
		}
		var top map[string]json.RawMessage
		if err := json.Unmarshal(pa.GetPatch(), &p); err != nil {
			return true, nil, err
		}
		_ = json.Unmarshal(pa.GetPatch(), &top)
		patchedRV = p.Metadata.ResourceVersion
		patchKeys, dataKeys = slices.Sorted(maps.Keys(top)), slices.Sorted(maps.Keys(p.Data))
		cur, err := h.kube.Tracker().Get(action.GetResource(), action.GetNamespace(), pa.GetName())
		if err != nil {
			return true, nil, err
		}
		if rv := cur.(*corev1.Secret).ResourceVersion; rv != p.Metadata.ResourceVersion {
			return true, nil, apierrors.NewConflict(action.GetResource().GroupResource(), pa.GetName(),
				fmt.Errorf("the object has been modified"))
		}
		return false, nil, nil
	})
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	h.addRequest(t, req)
	if _, _, err := h.c.syncRequest(context.Background(), keyFor(req)); err != nil {
		t.Fatal(err)
	}
	s := getSecret(t, h, "webhook-tls")
	stale := s.DeepCopy()
	stale.ResourceVersion = "0-stale"
	stale.Annotations[certapiv1alpha1.AnnotationGeneration] = "0" // the stale cache thinks a re-issue is due
	h.cacheSecret(t, stale)
	_, _, err := h.c.syncRequest(context.Background(), keyFor(req))
	if !apierrors.IsConflict(err) {
		t.Fatalf("sync with a stale cache: %v; want a 409 Conflict (retried once the cache catches up)", err)
	}
	if patchedRV != "0-stale" {
		t.Errorf("patch carried resourceVersion %q; want the one decide saw", patchedRV)
	}
	if !slices.Equal(patchKeys, []string{"data", "metadata"}) || !slices.Equal(dataKeys, []string{"ca.crt", "tls.crt", "tls.key"}) {
		t.Errorf("patch touches %v, data %v; want only metadata and certapi's three keys", patchKeys, dataKeys)
	}
	if after := getSecret(t, h, "webhook-tls"); after.Annotations[certapiv1alpha1.AnnotationSerialNumber] != s.Annotations[certapiv1alpha1.AnnotationSerialNumber] {
		t.Errorf("Secret overwritten despite a stale resourceVersion")
	}
	if evs := h.events(); len(evs) != 1 {
		t.Errorf("events %q; want only the first Issued", evs)
	}
}

func TestSyncNoop(t *testing.T) {
	deleting := newRequest("deleting", "webhook-svc", "deleting-tls")
	now := metav1.NewTime(testNow)
	deleting.DeletionTimestamp = &now
	deleting.Finalizers = []string{"x"}
	tests := []struct {
		name      string
		req       *certapiv1alpha1.ServingCertRequest
		notSigned bool
		wantAfter time.Duration
	}{
		{name: "skip-no-secretName", req: newRequest("plain", "webhook-svc", "")},
		{name: "request deleted"},
		{name: "request being deleted", req: deleting},
		// Not signing: no timer; the Authority's change enqueues it (TestNotSigningWaitsForTheAuthority).
		{name: "not signing", req: newRequest("webhook", "webhook-svc", "webhook-tls"), notSigned: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t)
			key := types.NamespacedName{Namespace: testNamespace, Name: "gone"}
			if tt.req != nil {
				h.addRequest(t, tt.req)
				key = keyFor(tt.req)
			}
			if tt.notSigned {
				h.authority.set(nil, nil, false)
			}
			res, conflict, err := h.c.syncRequest(context.Background(), key)
			if err != nil {
				t.Fatalf("sync: %v", err)
			}
			if res.After != tt.wantAfter || conflict {
				t.Errorf("result %+v; want after %s", res, tt.wantAfter)
			}
			if len(h.kube.Actions()) != 0 {
				t.Errorf("kube actions %v; want none", h.kube.Actions())
			}
			if evs := h.events(); len(evs) != 0 {
				t.Errorf("events %q; want none", evs)
			}
		})
	}
}

// TestSyncDeniedReportsAndBacksOff: a request the CA cannot sign for (here: a cluster domain outside the
// CA's name constraints) is reported as Denied and retried with backoff, not in a loop.
func TestSyncDeniedReportsAndBacksOff(t *testing.T) {
	h := newHarness(t)
	h.c.clusterDomain = "other.example"
	h.authority.domain = "other.example"
	runStatus(t, h)
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	if _, err := h.certapi.CertapiV1alpha1().ServingCertRequests(testNamespace).Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.addRequest(t, req)
	for range 2 {
		if _, _, err := h.c.syncRequest(context.Background(), keyFor(req)); err == nil {
			t.Fatal("sync succeeded; want a signing error (retried with backoff)")
		}
	}
	if w := h.secretWrites(); len(w) != 0 {
		t.Errorf("Secret writes %v; want none", w)
	}
	if evs := h.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning Denied") {
		t.Errorf("events %q; want one Warning Denied", evs)
	}
	got := waitReady(t, h, req, status.ReasonDenied)
	if cond := readyCondition(got); cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "name constraints") {
		t.Errorf("Ready %+v", cond)
	}
}

func TestNewValidates(t *testing.T) {
	h := newHarness(t)
	good := func() Options {
		return Options{Context: newTestContext(t, h.kube, h.certapi), Authority: h.authority, Status: h.status}
	}
	if _, err := New(good()); err != nil {
		t.Fatalf("New: %v", err)
	}
	for name, mutate := range map[string]func(*Options){
		"no Context":       func(o *Options) { o.Context = nil },
		"no Authority":     func(o *Options) { o.Authority = nil },
		"no Status":        func(o *Options) { o.Status = nil },
		"no ClusterDomain": func(o *Options) { o.Context.ClusterDomain = "" },
		"negative Workers": func(o *Options) { o.Workers = -1 },
	} {
		o := good()
		mutate(&o)
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

// TestSecretsNoRequestNamesMakeNoWork: a labelled Secret whose annotation names no existing request, and
// that no request's secretName names, enqueues nothing; one that an existing request claims does.
func TestSecretsNoRequestNamesMakeNoWork(t *testing.T) {
	h := newHarness(t)
	defer h.c.queue.ShutDown()
	orphan := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "orphan",
		Labels: map[string]string{certapiv1alpha1.LabelManaged: "true"}, Annotations: map[string]string{certapiv1alpha1.AnnotationServingCertRequest: "gone"}}}
	h.c.onSecret(viewOf(orphan))
	if n := h.c.queue.Len(); n != 0 {
		t.Fatalf("a Secret no request names enqueued %d requests", n)
	}
	h.addRequest(t, newRequest("gone", "svc", "elsewhere-tls"))
	h.c.onSecret(viewOf(orphan))
	if n := h.c.queue.Len(); n != 1 {
		t.Fatalf("a Secret annotated for an existing request enqueued %d requests; want 1", n)
	}
}

// TestNotSigningWaitsForTheAuthority: a request looked at while the Authority cannot sign is not
// retried on a timer; it is enqueued when the Authority signs again, and only then.
func TestNotSigningWaitsForTheAuthority(t *testing.T) {
	h := newHarness(t)
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	h.addRequest(t, req)
	h.authority.set(nil, nil, false)
	res, _, err := h.c.syncRequest(context.Background(), keyFor(req))
	if err != nil || res.After != 0 {
		t.Fatalf("sync while not signing: %+v, %v; want no timer and no error", res, err)
	}
	h.c.enqueueNotSigning() // the Authority changed, but still does not sign
	if n := h.c.queue.Len(); n != 0 {
		t.Fatalf("queue holds %d keys while the Authority does not sign; want 0", n)
	}
	h.authority.set(h.ca, h.bundle, true)
	h.c.enqueueNotSigning() // what Run's listener does on that change
	if n := h.c.queue.Len(); n != 1 {
		t.Fatalf("queue holds %d keys after signing resumed; want the waiting request", n)
	}
	h.c.enqueueNotSigning()
	if n := h.c.queue.Len(); n != 1 {
		t.Errorf("queue holds %d keys after a second change; want the request once", n)
	}
}
