package secretdelivery

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

func TestDecide(t *testing.T) {
	ca := newTestCA(t, testNow.Add(-time.Hour))
	bundle := signer.EncodeBundle(ca.Certificate)
	otherCA := newTestCA(t, testNow.Add(-time.Hour))

	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	issuedAt := testNow.Add(-time.Hour)
	current := deliveredSecret(t, req, ca, bundle, issuedAt)
	renewAt, err := time.Parse(time.RFC3339, current.Annotations[certapiv1alpha1.AnnotationRenewalTime])
	if err != nil {
		t.Fatal(err)
	}
	otherKeySecret := deliveredSecret(t, req, ca, bundle, issuedAt)

	// edit returns a copy of current changed by f.
	edit := func(f func(s *corev1.Secret)) *corev1.Secret {
		s := current.DeepCopy()
		f(s)
		return s
	}
	immutable := true

	tests := []struct {
		name      string
		req       *certapiv1alpha1.ServingCertRequest
		secret    *corev1.Secret
		ca        *signer.CA
		bundle    []byte
		now       time.Time
		want      action
		renewal   bool
		whyOrMsg  []string // substrings of Why (issue) or Conflict (conflict)
		wantRenew time.Time
		uidExists bool // decideInput.RecordedUIDExists
	}{
		{
			name: "skip-no-secretName",
			req: func() *certapiv1alpha1.ServingCertRequest {
				r := req.DeepCopy()
				r.Spec.SecretName = ""
				return r
			}(),
			want: actionSkip,
		},
		{
			name:     "create when the Secret is missing",
			want:     actionCreate,
			whyOrMsg: []string{`Secret "webhook-tls" does not exist`},
		},
		{
			name:      "current certificate: wait for renewal",
			secret:    current,
			want:      actionNone,
			wantRenew: renewAt,
		},
		{
			name:     "renew at the renewal time",
			secret:   current,
			now:      renewAt,
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"renewal was due at"},
		},
		{
			name: "adopt an empty Secret annotated for this request (Helm, Argo CD)",
			secret: &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "webhook-tls", ResourceVersion: "3",
					Annotations: map[string]string{certapiv1alpha1.AnnotationServingCertRequest: "webhook", "meta.helm.sh/release-name": "x"}},
				Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{corev1.TLSCertKey: nil, corev1.TLSPrivateKeyKey: nil},
			},
			want:     actionIssue,
			whyOrMsg: []string{"handed over", "holds no certificate"},
		},
		{
			name: "adopt a Secret handed over with someone else's certificate",
			secret: edit(func(s *corev1.Secret) {
				delete(s.Labels, certapiv1alpha1.LabelManaged)
				delete(s.Annotations, certapiv1alpha1.AnnotationSerialNumber)
			}),
			want:     actionIssue,
			whyOrMsg: []string{"lacks the label"},
		},
		{
			name:     "re-issue once when renewal is requested",
			req:      withRenewRequest(req, "2026-12-06T18:00:00Z"),
			secret:   current,
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"renewal was requested", certapiv1alpha1.AnnotationRenewRequestedAt + "=2026-12-06T18:00:00Z"},
		},
		{
			name: "a renewal request the Secret already answers: wait for renewal",
			req:  withRenewRequest(req, "2026-12-06T18:00:00Z"),
			secret: edit(func(s *corev1.Secret) {
				s.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt] = "2026-12-06T18:00:00Z"
			}),
			want:      actionNone,
			wantRenew: renewAt,
		},
		{
			name: "a new renewal request after one answered: re-issue",
			req:  withRenewRequest(req, "2026-12-06T19:00:00Z"),
			secret: edit(func(s *corev1.Secret) {
				s.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt] = "2026-12-06T18:00:00Z"
			}),
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"renewal was requested", "2026-12-06T19:00:00Z"},
		},
		{
			name: "the renewal request removed after it was answered: wait for renewal",
			secret: edit(func(s *corev1.Secret) {
				s.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt] = "2026-12-06T18:00:00Z"
			}),
			want:      actionNone,
			wantRenew: renewAt,
		},
		{
			name: "a renewal request does not override a conflict",
			req:  withRenewRequest(req, "2026-12-06T18:00:00Z"),
			secret: edit(func(s *corev1.Secret) {
				s.Annotations[certapiv1alpha1.AnnotationServingCertRequest] = "other"
			}),
			want:     actionConflict,
			whyOrMsg: []string{`ServingCertRequest "other"`},
		},
		{
			name:     "re-issue when the CA bundle changed",
			secret:   current,
			bundle:   signer.EncodeBundle(ca.Certificate, otherCA.Certificate),
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"CA bundle changed"},
		},
		{
			name:     "re-issue when the signing CA changed",
			secret:   current,
			ca:       otherCA,
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"signing CA changed"},
		},
		{
			name: "re-issue when the spec changed",
			req: func() *certapiv1alpha1.ServingCertRequest {
				r := req.DeepCopy()
				r.Generation = 2
				return r
			}(),
			secret:   current,
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"spec changed", "generation 2"},
		},
		{
			name: "re-issue when the names differ (same generation)",
			req: func() *certapiv1alpha1.ServingCertRequest {
				r := req.DeepCopy()
				r.Spec.DNSNames = []string{"*.webhook-svc.webhooks.svc"}
				return r
			}(),
			secret:   current,
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"names"},
		},
		{
			name: "re-issue when tls.key does not belong to tls.crt",
			secret: edit(func(s *corev1.Secret) {
				s.Data[corev1.TLSPrivateKeyKey] = otherKeySecret.Data[corev1.TLSPrivateKeyKey]
			}),
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"tls.key"},
		},
		{
			name: "re-issue when tls.crt is damaged",
			secret: edit(func(s *corev1.Secret) {
				s.Data[corev1.TLSCertKey] = []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
			}),
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"tls.crt"},
		},
		{
			name: "re-issue when the renewal annotation is pushed past notAfter",
			secret: edit(func(s *corev1.Secret) {
				s.Annotations[certapiv1alpha1.AnnotationRenewalTime] = "2099-01-01T00:00:00Z"
			}),
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{certapiv1alpha1.AnnotationRenewalTime},
		},
		{
			name: "conflict-foreign: a Secret certapi did not create",
			secret: &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "webhook-tls"},
				Type:       corev1.SecretTypeTLS,
				Data:       map[string][]byte{corev1.TLSCertKey: []byte("x"), corev1.TLSPrivateKeyKey: []byte("y")},
			},
			want: actionConflict,
			whyOrMsg: []string{`Secret "webhook-tls" exists and was not created by certapi`,
				"delete it, or annotate it certapi.dev/servingcertrequest=webhook to hand it over"},
		},
		{
			name: "conflict-foreign: carries the managed label but no annotation",
			secret: edit(func(s *corev1.Secret) {
				delete(s.Annotations, certapiv1alpha1.AnnotationServingCertRequest)
			}),
			want:     actionConflict,
			whyOrMsg: []string{"was not created by certapi"},
		},
		{
			name: "conflict-type: annotated for this request but Opaque",
			secret: &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "webhook-tls",
					Annotations: map[string]string{certapiv1alpha1.AnnotationServingCertRequest: "webhook"}},
				Type: corev1.SecretTypeOpaque,
			},
			want:     actionConflict,
			whyOrMsg: []string{"type Opaque", "kubernetes.io/tls", "delete it"},
		},
		{
			name: "conflict-type: foreign Secret without a type",
			secret: &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "webhook-tls"},
			},
			want:     actionConflict,
			whyOrMsg: []string{"type Opaque"},
		},
		{
			name: "conflict-other-request: another request delivers into it",
			secret: edit(func(s *corev1.Secret) {
				s.Annotations[certapiv1alpha1.AnnotationServingCertRequest] = "other"
			}),
			want: actionConflict,
			whyOrMsg: []string{`ServingCertRequest "other"`, "choose another spec.secretName",
				"certapi.dev/servingcertrequest=webhook to hand it over"},
		},
		{
			name: "adopt: the Secret records the UID of an earlier request of this name, which no longer exists (deleted and created again, or lost with certapi's etcd)",
			secret: edit(func(s *corev1.Secret) {
				s.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID] = "uid-of-an-earlier-webhook"
			}),
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"earlier ServingCertRequest", "uid-of-an-earlier-webhook", "no longer exists", "uid-webhook", "adopts it"},
		},
		{
			name: "adopt a Secret of a lost request even when its certificate is not due (from a CA that is still in the bundle)",
			secret: edit(func(s *corev1.Secret) {
				s.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID] = "uid-of-an-earlier-webhook"
			}),
			bundle:   signer.EncodeBundle(ca.Certificate),
			now:      testNow.Add(time.Minute),
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"adopts it"},
		},
		{
			name: "conflict-uid: the Secret records the UID of another request that exists",
			secret: edit(func(s *corev1.Secret) {
				s.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID] = "uid-of-a-live-request"
			}),
			uidExists: true,
			want:      actionConflict,
			whyOrMsg:  []string{"uid-of-a-live-request", "which exists", "uid-webhook", "two requests cannot share a Secret"},
		},
		{
			name:      "the Secret records this request's UID: a live request of its own is no conflict",
			secret:    current,
			uidExists: true,
			want:      actionNone,
			wantRenew: renewAt,
		},
		{
			name: "conflict-other-request wins over adoption: annotated for another request, recording a UID nobody has",
			secret: edit(func(s *corev1.Secret) {
				s.Annotations[certapiv1alpha1.AnnotationServingCertRequest] = "other"
				s.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID] = "uid-of-an-earlier-other"
			}),
			want:     actionConflict,
			whyOrMsg: []string{`ServingCertRequest "other"`, "certapi.dev/servingcertrequest=webhook to hand it over"},
		},
		{
			name: "record the UID on a current Secret written before certapi recorded it",
			secret: edit(func(s *corev1.Secret) {
				delete(s.Annotations, certapiv1alpha1.AnnotationServingCertRequestUID)
			}),
			want:      actionRecordUID,
			whyOrMsg:  []string{certapiv1alpha1.AnnotationServingCertRequestUID},
			wantRenew: renewAt,
		},
		{
			name: "a Secret without the UID that needs a certificate anyway is re-issued (the write records it)",
			secret: edit(func(s *corev1.Secret) {
				delete(s.Annotations, certapiv1alpha1.AnnotationServingCertRequestUID)
			}),
			now:      renewAt,
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{"renewal was due"},
		},
		{
			name: "conflict: an immutable Secret cannot be renewed in place",
			secret: edit(func(s *corev1.Secret) {
				s.Immutable = &immutable
			}),
			want:     actionConflict,
			whyOrMsg: []string{"immutable"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := decideInput{
				Request:       req,
				CA:            ca.Certificate,
				Bundle:        bundle,
				ClusterDomain: testDomain,
				Now:           testNow,
			}
			if tt.req != nil {
				in.Request = tt.req
			}
			if tt.secret != nil {
				in.Secret = viewOf(tt.secret)
			}
			if tt.ca != nil {
				in.CA = tt.ca.Certificate
			}
			if tt.bundle != nil {
				in.Bundle = tt.bundle
			}
			if !tt.now.IsZero() {
				in.Now = tt.now
			}
			in.RecordedUIDExists = tt.uidExists
			d := decide(in)
			if d.Action != tt.want {
				t.Fatalf("action = %s (why %q, conflict %q); want %s", d.Action, d.Why, d.Conflict, tt.want)
			}
			if d.Renewal != tt.renewal {
				t.Errorf("renewal = %v; want %v", d.Renewal, tt.renewal)
			}
			text := d.Why
			if d.Action == actionConflict {
				text = d.Conflict
			}
			for _, sub := range tt.whyOrMsg {
				if !strings.Contains(text, sub) {
					t.Errorf("message %q does not contain %q", text, sub)
				}
			}
			if !tt.wantRenew.IsZero() && !d.RenewAt.Equal(tt.wantRenew) {
				t.Errorf("renewAt = %s; want %s", d.RenewAt, tt.wantRenew)
			}
		})
	}
}

// TestDecideCurrentUntilRenewal walks a certificate's life: current until its renewal time, due from it on.
func TestDecideCurrentUntilRenewal(t *testing.T) {
	ca := newTestCA(t, testNow.Add(-time.Hour))
	bundle := signer.EncodeBundle(ca.Certificate)
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	req.Spec.Duration = &metav1.Duration{Duration: 3 * time.Hour}
	req.Spec.RenewBefore = &metav1.Duration{Duration: time.Hour}
	s := deliveredSecret(t, req, ca, bundle, testNow)
	renewAt, _ := time.Parse(time.RFC3339, s.Annotations[certapiv1alpha1.AnnotationRenewalTime])
	if want := testNow.Add(2 * time.Hour); !renewAt.Equal(want) {
		t.Fatalf("renewal time %s; want notAfter - renewBefore = %s", renewAt, want)
	}
	for _, tc := range []struct {
		at   time.Time
		want action
	}{
		{testNow, actionNone},
		{renewAt.Add(-time.Second), actionNone},
		{renewAt, actionIssue},
		{testNow.Add(4 * time.Hour), actionIssue}, // expired
	} {
		d := decide(decideInput{Request: req, Secret: viewOf(s), CA: ca.Certificate, Bundle: bundle, ClusterDomain: testDomain, Now: tc.at})
		if d.Action != tc.want {
			t.Errorf("at %s: %s (%s); want %s", tc.at, d.Action, d.Why, tc.want)
		}
	}
}

// TestViewSecret: the cache's view of a Secret keeps certapi's metadata and a summary of its data, never
// the private key nor the rest of the data, and is idempotent.
func TestViewSecret(t *testing.T) {
	ca := newTestCA(t, testNow.Add(-time.Hour))
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	req.Spec.DNSNames = []string{"b.webhooks.svc", "a.webhooks.svc"}
	bundle := signer.EncodeBundle(ca.Certificate)
	s := deliveredSecret(t, req, ca, bundle, testNow)
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: certapiv1alpha1.FieldManager}}
	s.Labels["app"] = "x"
	s.Annotations["meta.helm.sh/release-name"] = "x"
	s.Data["blob"] = make([]byte, 1<<20)
	s.UID = "uid-1"

	got, err := viewSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := got.(*secretView)
	if !ok {
		t.Fatalf("viewSecret gave %T", got)
	}
	if v.Namespace != s.Namespace || v.Name != s.Name || v.UID != s.UID || v.ResourceVersion != s.ResourceVersion {
		t.Errorf("identity %s/%s %s rv %s; want the Secret's", v.Namespace, v.Name, v.UID, v.ResourceVersion)
	}
	if len(v.Labels) != 1 || v.Labels[certapiv1alpha1.LabelManaged] != "true" || v.ManagedFields != nil {
		t.Errorf("labels %v, managedFields %v: want only %s", v.Labels, v.ManagedFields, certapiv1alpha1.LabelManaged)
	}
	if _, ok := v.Annotations["meta.helm.sh/release-name"]; ok || v.Annotations[certapiv1alpha1.AnnotationServingCertRequest] != "webhook" {
		t.Errorf("annotations %v: want only certapi's", v.Annotations)
	}
	cert, err := parseLeaf(s.Data[corev1.TLSCertKey])
	if err != nil {
		t.Fatal(err)
	}
	if !v.HasCert || v.Cert == nil || !bytes.Equal(v.Cert.AuthorityKeyID, ca.Certificate.SubjectKeyId) ||
		v.Cert.SerialNumber != signer.FormatSerialNumber(cert.SerialNumber) || !v.Cert.NotAfter.Equal(cert.NotAfter) {
		t.Errorf("certificate summary %+v does not describe tls.crt", v.Cert)
	}
	if want := []string{"a.webhooks.svc", "b.webhooks.svc", "webhook-svc.webhooks.svc", "webhook-svc.webhooks.svc." + testDomain}; !slices.Equal(v.Cert.DNSNames, want) {
		t.Errorf("names %v; want %v", v.Cert.DNSNames, want)
	}
	if v.KeyMarker != publicKeyMarker(cert) || v.Cert.PublicKeyMarker != v.KeyMarker {
		t.Errorf("key marker %q, certificate's %q", v.KeyMarker, v.Cert.PublicKeyMarker)
	}
	if v.BundleDigest != sha256.Sum256(bundle) {
		t.Errorf("bundle digest does not match ca.crt")
	}
	if strings.Contains(fmt.Sprintf("%+v", *v), "PRIVATE KEY") {
		t.Error("the view holds the private key")
	}
	if again, _ := viewSecret(v); again != v {
		t.Error("viewSecret is not idempotent")
	}
	if other, _ := viewSecret("not a secret"); other != "not a secret" {
		t.Errorf("viewSecret changed a non-Secret")
	}
}

// TestViewSecretBounds: whatever a labelled Secret holds, its view stays small: unusable data is
// summarised as an error, and a certificate with more names than any request can have keeps none.
func TestViewSecretBounds(t *testing.T) {
	junk := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "junk", Labels: map[string]string{certapiv1alpha1.LabelManaged: "true"}},
		Data:       map[string][]byte{corev1.TLSCertKey: make([]byte, 1<<20), corev1.TLSPrivateKeyKey: []byte("x"), "blob": make([]byte, 1<<20)},
	}
	v := viewOf(junk)
	if !v.HasCert || v.Cert != nil || v.CertError == "" || v.KeyMarker != "" {
		t.Errorf("junk: %+v; want HasCert, no summary, an error, no key marker", v)
	}

	ca := newTestCA(t, testNow.Add(-time.Hour))
	key, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, maxCachedNames+1)
	for i := range names {
		names[i] = fmt.Sprintf("n%d.webhooks.svc", i)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), DNSNames: names, NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Certificate, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	many := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "many"},
		Data: map[string][]byte{corev1.TLSCertKey: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}}
	v = viewOf(many)
	if v.Cert == nil || !v.Cert.TooManyNames || v.Cert.DNSNames != nil {
		t.Fatalf("a certificate with %d names: summary %+v; want TooManyNames and no names", len(names), v.Cert)
	}
	req := newRequest("webhook", "webhook-svc", "many")
	many.Annotations = map[string]string{certapiv1alpha1.AnnotationServingCertRequest: "webhook", certapiv1alpha1.AnnotationSerialNumber: "7",
		certapiv1alpha1.AnnotationGeneration: "1", certapiv1alpha1.AnnotationRenewalTime: testNow.Add(time.Minute).Format(time.RFC3339)}
	many.Labels = map[string]string{certapiv1alpha1.LabelManaged: "true"}
	many.Type = corev1.SecretTypeTLS
	many.Data[certapiv1alpha1.SecretKeyCABundle] = signer.EncodeBundle(ca.Certificate)
	if d := decide(decideInput{Request: req, Secret: viewOf(many), CA: ca.Certificate, Bundle: signer.EncodeBundle(ca.Certificate),
		ClusterDomain: testDomain, Now: testNow}); d.Action != actionIssue || !strings.Contains(d.Why, "names") {
		t.Errorf("decide on a certificate with too many names: %s (%s); want a re-issue for its names", d.Action, d.Why)
	}
}

// TestKeyMarkerMatchesFullParse: the light RSA path gives the same marker as a full parse, for PKCS#8 and
// PKCS#1 keys, and damaged keys give none.
func TestKeyMarkerMatchesFullParse(t *testing.T) {
	for _, alg := range []signer.KeyAlgorithm{signer.ECDSAP256, signer.RSA2048} {
		key, err := signer.GenerateKey(alg)
		if err != nil {
			t.Fatal(err)
		}
		spki, err := x509.MarshalPKIXPublicKey(key.Public())
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(spki)
		want := keyMarkerPrefix + hex.EncodeToString(sum[:])
		p8, err := signer.EncodeKeyPEM(key)
		if err != nil {
			t.Fatal(err)
		}
		forms := map[string][]byte{"PKCS#8": p8}
		if rk, ok := key.(*rsa.PrivateKey); ok {
			forms["PKCS#1"] = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)})
		}
		for form, v := range forms {
			if got := keyMarker(v); got != want {
				t.Errorf("%s %s: marker %q; want %q", alg, form, got, want)
			}
			damaged := bytes.Replace(v, []byte("KEY-----\n"), []byte("KEY-----\nAAAA"), 1)
			if got := keyMarker(damaged); got != "" {
				t.Errorf("%s %s damaged: marker %q; want none", alg, form, got)
			}
		}
	}
	if got := keyMarker([]byte("not a key")); got != "" {
		t.Errorf("marker of garbage %q", got)
	}
}

// TestTallyDistrust: a pending distrust waits only for the Secrets certapi delivers now for an existing
// request that names them; every other labelled Secret holding an old certificate is reported, never
// waited for.
func TestTallyDistrust(t *testing.T) {
	oldCA := newTestCA(t, testNow.Add(-time.Hour))
	newCA := newTestCA(t, testNow.Add(-time.Hour))
	oldBundle := signer.EncodeBundle(oldCA.Certificate)
	newBundle := signer.EncodeBundle(newCA.Certificate, oldCA.Certificate)

	live := newRequest("live", "live-svc", "live-tls")
	requests := map[string]*certapiv1alpha1.ServingCertRequest{"live": live}
	add := func(r *certapiv1alpha1.ServingCertRequest) *certapiv1alpha1.ServingCertRequest {
		requests[r.Name] = r
		return r
	}
	// old is the Secret certapi delivered for req before the distrust; edit changes a copy.
	old := func(req *certapiv1alpha1.ServingCertRequest, edit ...func(*corev1.Secret)) *corev1.Secret {
		s := deliveredSecret(t, req, oldCA, oldBundle, testNow)
		for _, f := range edit {
			f(s)
		}
		return s
	}
	renamed := func(name string) func(*corev1.Secret) { return func(s *corev1.Secret) { s.Name = name } }

	deleting := add(newRequest("deleting", "deleting-svc", "deleting-tls"))
	deleting.DeletionTimestamp = &metav1.Time{Time: testNow}
	add(newRequest("moved", "moved-svc", "moved-new-tls")) // its secretName changed since
	recreated := add(newRequest("recreated", "recreated-svc", "recreated-tls"))
	immutable := true

	cases := []struct {
		name    string
		secret  *corev1.Secret
		pending bool
		report  bool // in Unmanaged
	}{
		{name: "delivered for an existing request, old certificate: waited for", secret: old(live), pending: true},
		{name: "delivered, re-issued by the Active CA: done", secret: deliveredSecret(t, live, newCA, newBundle, testNow)},
		{name: "delivered, tls.crt unusable: waited for (certapi re-issues it)", pending: true,
			secret: old(live, func(s *corev1.Secret) { s.Data[corev1.TLSCertKey] = []byte("junk") })},
		{name: "adopted, not filled yet: nothing to distrust",
			secret: old(live, func(s *corev1.Secret) { delete(s.Data, corev1.TLSCertKey) })},
		{name: "foreign: labelled, no annotation", report: true,
			secret: old(live, renamed("foreign"), func(s *corev1.Secret) { s.Annotations = nil })},
		{name: "request deleted", report: true, secret: old(newRequest("gone", "gone-svc", "gone-tls"))},
		{name: "request being deleted", report: true, secret: old(deleting)},
		{name: "the request names another Secret now", report: true, secret: old(newRequest("moved", "moved-svc", "moved-tls"))},
		{name: "an earlier request of the same name (UID): the request of that name adopts it, waited for", pending: true, secret: old(func() *certapiv1alpha1.ServingCertRequest {
			r := recreated.DeepCopy()
			r.UID = "uid-of-the-earlier-one"
			return r
		}())},
		{name: "immutable: in conflict", report: true, secret: old(live, renamed("live-tls"), func(s *corev1.Secret) { s.Immutable = &immutable })},
		{name: "foreign, from the Active CA: nothing to report",
			secret: func() *corev1.Secret {
				s := deliveredSecret(t, live, newCA, newBundle, testNow)
				s.Name, s.Annotations = "foreign-new", nil
				return s
			}()},
		{name: "foreign, junk in tls.crt: no certificate to report",
			secret: old(live, renamed("junk"), func(s *corev1.Secret) { s.Annotations = nil; s.Data[corev1.TLSCertKey] = []byte("junk") })},
	}
	lookup := func(namespace, name string) *certapiv1alpha1.ServingCertRequest {
		if namespace != testNamespace {
			return nil
		}
		return requests[name]
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tallyDistrust([]*secretView{viewOf(tc.secret)}, lookup, newCA.Certificate.SubjectKeyId)
			want := testNamespace + "/" + tc.secret.Name
			if tc.pending != (got.Pending.Count == 1 && slices.Equal(got.Pending.Names, []string{want})) || (!tc.pending && got.Pending.Count != 0) {
				t.Errorf("pending %+v; want it %v", got.Pending, tc.pending)
			}
			if tc.report != (got.Unmanaged.Count == 1 && slices.Equal(got.Unmanaged.Names, []string{want})) || (!tc.report && got.Unmanaged.Count != 0) {
				t.Errorf("unmanaged %+v; want it %v", got.Unmanaged, tc.report)
			}
		})
	}

	// Every Secret is counted; the first MaxReportedSecrets are named, in order.
	var many []*secretView
	for i := 14; i >= 0; i-- {
		many = append(many, viewOf(old(live, renamed(fmt.Sprintf("s-%02d", i)), func(s *corev1.Secret) { s.Annotations = nil })))
	}
	got := tallyDistrust(many, lookup, newCA.Certificate.SubjectKeyId)
	if got.Unmanaged.Count != 15 || len(got.Unmanaged.Names) != MaxReportedSecrets || got.Unmanaged.Names[0] != testNamespace+"/s-00" ||
		got.Unmanaged.Names[MaxReportedSecrets-1] != testNamespace+"/s-09" {
		t.Errorf("15 unmanaged Secrets: %+v", got.Unmanaged)
	}
}

func TestDecideAccess(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   namespaceAccess
		want accessAction
	}{
		{name: "not opted in", in: namespaceAccess{}, want: accessNotOptedIn},
		{name: "not opted in, a cache still running", in: namespaceAccess{Running: true, Synced: true}, want: accessNotOptedIn},
		{name: "opted in, no cache yet", in: namespaceAccess{OptedIn: true}, want: accessWait},
		{name: "opted in, cache starting", in: namespaceAccess{OptedIn: true, Running: true}, want: accessWait},
		{name: "opted in, synced", in: namespaceAccess{OptedIn: true, Running: true, Synced: true}, want: accessDeliver},
		{name: "cluster scope", in: namespaceAccess{OptedIn: true, Synced: true}, want: accessDeliver},
		{name: "opted in, list refused", in: namespaceAccess{OptedIn: true, Running: true, Forbidden: "secrets is forbidden"}, want: accessForbidden},
		{name: "synced, a later watch refused: the cache still serves", in: namespaceAccess{OptedIn: true, Running: true, Synced: true, Forbidden: "x"}, want: accessDeliver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideAccess(tc.in); got != tc.want {
				t.Errorf("decideAccess(%+v) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func TestDecideNamespace(t *testing.T) {
	for _, tc := range []struct {
		optedIn, running bool
		want             namespaceAction
	}{
		{optedIn: true, running: false, want: namespaceStart},
		{optedIn: true, running: true, want: namespaceKeep},
		{optedIn: false, running: true, want: namespaceStop},
		{optedIn: false, running: false, want: namespaceKeep},
	} {
		if got := decideNamespace(tc.optedIn, tc.running); got != tc.want {
			t.Errorf("decideNamespace(optedIn %v, running %v) = %d, want %d", tc.optedIn, tc.running, got, tc.want)
		}
	}
}

// withRenewRequest returns a copy of req annotated to ask for a renewal with value at.
func withRenewRequest(req *certapiv1alpha1.ServingCertRequest, at string) *certapiv1alpha1.ServingCertRequest {
	r := req.DeepCopy()
	if r.Annotations == nil {
		r.Annotations = map[string]string{}
	}
	r.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt] = at
	return r
}
