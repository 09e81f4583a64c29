package secretdelivery

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
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
	renewAt, err := time.Parse(time.RFC3339, current.Annotations[AnnotationRenewalTime])
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
	trimmed, _ := trimSecret(current.DeepCopy())
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
			name:      "current certificate from the cache (tls.key replaced by its marker)",
			secret:    trimmed.(*corev1.Secret),
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
					Annotations: map[string]string{AnnotationServingCertRequest: "webhook", "meta.helm.sh/release-name": "x"}},
				Type: corev1.SecretTypeTLS,
				Data: map[string][]byte{corev1.TLSCertKey: nil, corev1.TLSPrivateKeyKey: nil},
			},
			want:     actionIssue,
			whyOrMsg: []string{"handed over", "holds no certificate"},
		},
		{
			name: "adopt a Secret handed over with someone else's certificate",
			secret: edit(func(s *corev1.Secret) {
				delete(s.Labels, LabelManaged)
				delete(s.Annotations, AnnotationSerialNumber)
			}),
			want:     actionIssue,
			whyOrMsg: []string{"lacks the label"},
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
				s.Annotations[AnnotationRenewalTime] = "2099-01-01T00:00:00Z"
			}),
			want:     actionIssue,
			renewal:  true,
			whyOrMsg: []string{AnnotationRenewalTime},
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
				delete(s.Annotations, AnnotationServingCertRequest)
			}),
			want:     actionConflict,
			whyOrMsg: []string{"was not created by certapi"},
		},
		{
			name: "conflict-type: annotated for this request but Opaque",
			secret: &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: "webhook-tls",
					Annotations: map[string]string{AnnotationServingCertRequest: "webhook"}},
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
				s.Annotations[AnnotationServingCertRequest] = "other"
			}),
			want: actionConflict,
			whyOrMsg: []string{`ServingCertRequest "other"`, "choose another spec.secretName",
				"certapi.dev/servingcertrequest=webhook to hand it over"},
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
				Secret:        tt.secret,
				CA:            ca.Certificate,
				Bundle:        bundle,
				ClusterDomain: testDomain,
				Now:           testNow,
			}
			if tt.req != nil {
				in.Request = tt.req
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
	renewAt, _ := time.Parse(time.RFC3339, s.Annotations[AnnotationRenewalTime])
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
		d := decide(decideInput{Request: req, Secret: s, CA: ca.Certificate, Bundle: bundle, ClusterDomain: testDomain, Now: tc.at})
		if d.Action != tc.want {
			t.Errorf("at %s: %s (%s); want %s", tc.at, d.Action, d.Why, tc.want)
		}
	}
}

func TestTrimSecretDropsKeyAndIsIdempotent(t *testing.T) {
	ca := newTestCA(t, testNow.Add(-time.Hour))
	req := newRequest("webhook", "webhook-svc", "webhook-tls")
	s := deliveredSecret(t, req, ca, signer.EncodeBundle(ca.Certificate), testNow)
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: FieldManager}}
	once, _ := trimSecret(s.DeepCopy())
	key := string(once.(*corev1.Secret).Data[corev1.TLSPrivateKeyKey])
	if strings.Contains(key, "PRIVATE KEY") || !strings.HasPrefix(key, keyMarkerPrefix) {
		t.Fatalf("trimmed tls.key = %q; want a marker", key)
	}
	if once.(*corev1.Secret).ManagedFields != nil {
		t.Errorf("managedFields kept")
	}
	twice, _ := trimSecret(once.(*corev1.Secret).DeepCopy())
	if got := string(twice.(*corev1.Secret).Data[corev1.TLSPrivateKeyKey]); got != key {
		t.Errorf("trimSecret is not idempotent: %q then %q", key, got)
	}
	if other, _ := trimSecret("not a secret"); other != "not a secret" {
		t.Errorf("trimSecret changed a non-Secret")
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
