package injector

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// foreignCert returns the PEM of a self-signed certificate of another issuer, a CA when isCA.
func foreignCert(tb testing.TB, cn string, isCA bool) []byte {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  isCA,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		tb.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestDecideKeepForeignCA(t *testing.T) {
	bundle := signertest.Bundle(t, 2) // certapi's Active and Next CAs
	d := digestOf(bundle)
	retired := signertest.Bundle(t, 1) // a certapi CA no longer in the bundle (retired, or distrusted)
	oldCA := foreignCert(t, "cert-manager-webhook-ca", true)
	otherCA := foreignCert(t, "service-ca@1700000000", true)
	leaf := foreignCert(t, "webhook.ns.svc", false)
	many := join(foreignCert(t, "a", true), foreignCert(t, "b", true), foreignCert(t, "c", true), foreignCert(t, "d", true), foreignCert(t, "e", true))

	for _, tc := range []struct {
		name  string
		keep  bool
		field []byte
		held  map[string]heldSlot
		// want is the field after the plan: nil when nothing is written.
		want        []byte
		upToDate    bool
		kept        int
		notKept     string
		overwritten bool
	}{
		{name: "keep: the old CA alone becomes bundle + old CA", keep: true, field: oldCA, want: join(bundle, oldCA), kept: 1},
		{name: "keep: bundle + old CA is up to date", keep: true, field: join(bundle, oldCA), upToDate: true, kept: 1},
		{name: "keep: old CA before the bundle is up to date too", keep: true, field: join(oldCA, bundle), upToDate: true, kept: 1},
		{name: "keep: two foreign CAs, both kept, duplicates once", keep: true, field: join(oldCA, otherCA, oldCA), want: join(bundle, oldCA, otherCA), kept: 2},
		{name: "keep: an empty field gets the bundle alone", keep: true, field: nil, want: bundle},
		{name: "keep: a retired or distrusted certapi CA is never kept", keep: true, field: join(retired, oldCA), want: join(bundle, oldCA), kept: 1},
		{name: "keep: an earlier certapi bundle is replaced, the old CA stays", keep: true, field: join(retired, oldCA), want: join(bundle, oldCA), kept: 1},
		{name: "keep: a certificate that is not a CA is not dropped: nothing is written", keep: true, field: join(oldCA, leaf), notKept: "is not a CA"},
		{name: "keep: more than the bound: nothing is written", keep: true, field: many, notKept: "more than 4 foreign CAs"},
		{name: "keep: data that is not PEM: nothing is written", keep: true, field: join(oldCA, []byte("garbage")), notKept: "not PEM"},
		{name: "keep: a private key in the field: nothing is written", keep: true, field: join(oldCA, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})), notKept: `"PRIVATE KEY"`},
		{name: "keep removed: the bundle alone, and that is no fight", field: join(bundle, oldCA),
			held: map[string]heldSlot{"w": {bundle: d, field: digestOf(join(bundle, oldCA))}}, want: bundle},
		{name: "no keep: the old CA alone is replaced", field: oldCA, want: bundle},
		{name: "no keep: a leaf is replaced without complaint", field: leaf, want: bundle},
		{name: "no keep: a CA appended to certapi's bundle by another writer is a fight", field: join(bundle, oldCA),
			held: map[string]heldSlot{"w": {bundle: d, field: d}}, want: bundle, overwritten: true},
		{name: "keep: certapi's part overwritten by another writer is a fight", keep: true, field: oldCA,
			held: map[string]heldSlot{"w": {bundle: d, field: digestOf(join(bundle, oldCA))}}, want: join(bundle, oldCA), kept: 1, overwritten: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ann := map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}
			if tc.keep {
				ann[certapiv1alpha1.AnnotationKeepForeignCA] = "true"
			}
			obs := observeValidating(&admissionregistrationv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "v", ResourceVersion: "7", Annotations: ann},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{
					{Name: "w", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: tc.field}},
				},
			})
			p := decide(obs, bundle, d, tc.held)
			if got := strings.Join(p.notKept, "; "); (tc.notKept == "") != (got == "") || !strings.Contains(got, tc.notKept) {
				t.Fatalf("notKept = %q, want one containing %q", got, tc.notKept)
			}
			if tc.notKept != "" {
				if p.patch != nil || p.upToDate {
					t.Fatalf("plan writes or is up to date although the field cannot be kept: %+v", p)
				}
				if obs.holds(d) {
					t.Fatal("holds = true for a field that cannot be kept")
				}
				return
			}
			if len(p.kept) != tc.kept {
				t.Errorf("kept = %q, want %d", p.kept, tc.kept)
			}
			if (len(p.overwritten) > 0) != tc.overwritten {
				t.Errorf("overwritten = %q, want %v", p.overwritten, tc.overwritten)
			}
			if p.upToDate != tc.upToDate || obs.holds(d) != tc.upToDate {
				t.Fatalf("upToDate = %v, holds = %v, want %v", p.upToDate, obs.holds(d), tc.upToDate)
			}
			if tc.upToDate {
				return
			}
			ops := decodePatch(t, p.patch)
			if len(ops) != 2 || ops[0].Op != "test" || ops[1].Path != "/webhooks/0/clientConfig/caBundle" {
				t.Fatalf("ops = %+v", ops)
			}
			got, err := base64.StdEncoding.DecodeString(ops[1].Value.(string))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("written field holds\n%s\nwant\n%s", got, tc.want)
			}
			// What is written is up to date when read back: the rotation gate counts it as holding the bundle.
			back := observeValidating(&admissionregistrationv1.ValidatingWebhookConfiguration{
				ObjectMeta: metav1.ObjectMeta{Name: "v", ResourceVersion: "8", Annotations: ann},
				Webhooks: []admissionregistrationv1.ValidatingWebhook{
					{Name: "w", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: got}},
				},
			})
			if p2 := decide(back, bundle, d, nil); !p2.upToDate || !back.holds(d) {
				t.Fatalf("the written field is not up to date when read back: %+v", p2)
			}
		})
	}
}

func TestKeepForeignCAAnnotation(t *testing.T) {
	for _, tc := range []struct {
		value   *string
		keep    bool
		problem bool
	}{
		{value: nil},
		{value: ptr("true"), keep: true},
		{value: ptr("false")},
		{value: ptr("yes"), problem: true},
		{value: ptr(""), problem: true},
		{value: ptr("2026-12-02T08:00:00Z"), problem: true},
	} {
		ann := map[string]string{}
		if tc.value != nil {
			ann[certapiv1alpha1.AnnotationKeepForeignCA] = *tc.value
		}
		keep, problem := keepForeignCA(ann)
		if keep != tc.keep || (problem != "") != tc.problem {
			t.Errorf("value %v: keep = %v, problem = %q", tc.value, keep, problem)
		}
		if tc.problem && !strings.Contains(problem, `"true"`) {
			t.Errorf("value %v: the problem does not say what is accepted: %q", tc.value, problem)
		}
		reason, _ := refusedTarget(KindValidatingWebhookConfiguration, "v", ann)
		if (reason == ReasonInvalidAnnotation) != tc.problem {
			t.Errorf("value %v: refusedTarget reason = %q", tc.value, reason)
		}
	}
	// Another injector's claim still wins over keeping: certapi does not write at all.
	reason, _ := refusedTarget(KindValidatingWebhookConfiguration, "v", map[string]string{
		certapiv1alpha1.AnnotationKeepForeignCA: "true", "cert-manager.io/inject-ca-from": "ns/cert",
	})
	if reason != ReasonClaimedByAnotherInjector {
		t.Errorf("with cert-manager's annotation too: reason = %q, want %s", reason, ReasonClaimedByAnotherInjector)
	}
}

// TestKeepForeignCAWithRootAnchor: under --ca-bundle-anchor=Root certapi's bundle carries the
// organisation's root, whose name is not certapi's: in a field that keeps foreign CAs it is part of the
// bundle, never kept as a foreign CA nor written twice.
func TestKeepForeignCAWithRootAnchor(t *testing.T) {
	root := signertest.NewRoot(t, "Example Org Root", time.Now())
	bundle := join(root.PEM(), signertest.Bundle(t, 1)) // the root of the Active CA, then a self-signed certapi CA
	d := digestOf(bundle)
	oldCA := foreignCert(t, "cert-manager-webhook-ca", true)
	ann := map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true", certapiv1alpha1.AnnotationKeepForeignCA: "true"}
	observe := func(field []byte) *observation {
		return observeValidating(&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "v", ResourceVersion: "7", Annotations: ann},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{
				{Name: "w", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: field}},
			},
		})
	}
	// The field as certapi writes it: up to date, one foreign CA kept (not the root).
	obs := observe(join(bundle, oldCA))
	if p := decide(obs, bundle, d, nil); !p.upToDate || !obs.holds(d) || len(p.kept) != 1 || !strings.Contains(p.kept[0], "cert-manager-webhook-ca") {
		t.Fatalf("bundle + old CA: upToDate %v, holds %v, kept %q; want up to date keeping the old CA only", p.upToDate, obs.holds(d), p.kept)
	}
	// A field that holds the root and the old CA before the bundle reached it: the bundle, then the
	// old CA, the root once.
	obs = observe(join(root.PEM(), oldCA))
	p := decide(obs, bundle, d, nil)
	if p.upToDate || len(p.kept) != 1 {
		t.Fatalf("root + old CA: upToDate %v, kept %q", p.upToDate, p.kept)
	}
	ops := decodePatch(t, p.patch)
	got, err := base64.StdEncoding.DecodeString(ops[1].Value.(string))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, join(bundle, oldCA)) {
		t.Fatalf("written field holds\n%s\nwant the bundle and the old CA", got)
	}
}
