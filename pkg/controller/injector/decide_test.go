package injector

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cabundle"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

func svc() *admissionregistrationv1.ServiceReference {
	return &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "svc"}
}

func ptr[T any](v T) *T { return &v }

// decodePatch parses a JSON patch made by decide.
func decodePatch(t *testing.T, patch []byte) []cabundle.Op {
	t.Helper()
	var ops []cabundle.Op
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	return ops
}

func TestDecideWebhooks(t *testing.T) {
	old, cur := signertest.Bundle(t, 1), signertest.Bundle(t, 2)
	d := digestOf(cur)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "w", ResourceVersion: "42"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "a", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: cur}},
			{Name: "url", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr("https://example.com")}},
			{Name: "b", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: old}},
			{Name: "c", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc()}},
		},
	}
	obs := observeValidating(vwc)

	// b held the current bundle when certapi last looked (someone overwrote it); c is new.
	p := decide(obs, cur, d, map[string]heldSlot{"a": {d, d}, "b": {d, d}})
	if p.upToDate || p.skip != "" || p.release != nil {
		t.Fatalf("plan = %+v", p)
	}
	ops := decodePatch(t, p.patch)
	want := []cabundle.Op{
		{Op: "test", Path: "/metadata/resourceVersion", Value: "42"},
		{Op: "add", Path: "/webhooks/2/clientConfig/caBundle", Value: base64.StdEncoding.EncodeToString(cur)},
		{Op: "add", Path: "/webhooks/3/clientConfig/caBundle", Value: base64.StdEncoding.EncodeToString(cur)},
	}
	if len(ops) != len(want) {
		t.Fatalf("ops = %+v, want %+v", ops, want)
	}
	for n := range want {
		if ops[n] != want[n] {
			t.Errorf("op %d = %+v, want %+v", n, ops[n], want[n])
		}
	}
	if strings.Join(p.write, ",") != `webhook "b",webhook "c"` {
		t.Errorf("write = %q", p.write)
	}
	if strings.Join(p.overwritten, ",") != `webhook "b"` {
		t.Errorf("overwritten = %q; only b held the current bundle before", p.overwritten)
	}

	// A rotation: nothing held the new bundle before, so nothing was overwritten.
	if p := decide(obs, cur, d, map[string]heldSlot{"a": {digestOf(old), digestOf(old)}, "b": {digestOf(old), digestOf(old)}}); len(p.overwritten) != 0 {
		t.Errorf("rotation counted as overwrite: %q", p.overwritten)
	}

	// Up to date: no write at all (byte-stable).
	for n := range vwc.Webhooks {
		if vwc.Webhooks[n].ClientConfig.Service != nil {
			vwc.Webhooks[n].ClientConfig.CABundle = cur
		}
	}
	if p := decide(observeValidating(vwc), cur, d, nil); !p.upToDate || p.patch != nil {
		t.Errorf("up to date: plan = %+v", p)
	}
	// One byte of difference (a trailing newline) is a difference.
	vwc.Webhooks[0].ClientConfig.CABundle = append(bytes.Clone(cur), '\n')
	if p := decide(observeValidating(vwc), cur, d, nil); p.upToDate || len(p.write) != 1 {
		t.Errorf("trailing newline: plan = %+v", p)
	}
}

func managedEntry(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "apiextensions.k8s.io/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

func TestOverwrittenBy(t *testing.T) {
	bundle := signertest.Bundle(t, 1)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "w", ManagedFields: []metav1.ManagedFieldsEntry{
			managedEntry("owner", metav1.ManagedFieldsOperationApply, `{"f:webhooks":{"k:{\"name\":\"a\"}":{".":{},"f:name":{},"f:clientConfig":{"f:service":{}}}}}`),
			managedEntry("argocd-controller", metav1.ManagedFieldsOperationUpdate, `{"f:webhooks":{"k:{\"name\":\"a\"}":{"f:clientConfig":{"f:caBundle":{}}}}}`),
		}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "a", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: bundle}}},
	}
	obs := observeValidating(vwc)
	if got := overwrittenBy(obs, []string{`webhook "a"`}); strings.Join(got, ",") != "argocd-controller" {
		t.Errorf("overwrittenBy = %q", got)
	}
}

func TestOnlyCABundle(t *testing.T) {
	for fields, want := range map[string]bool{
		`{"f:webhooks":{"k:{\"name\":\"a\"}":{"f:clientConfig":{"f:caBundle":{}}},"k:{\"name\":\"b\"}":{"f:clientConfig":{"f:caBundle":{}}}}}`: true,
		`{"f:spec":{"f:caBundle":{}}}`: true,
		`{"f:webhooks":{"k:{\"name\":\"a\"}":{".":{},"f:clientConfig":{"f:caBundle":{}}}}}`: false,
		`{"f:spec":{"f:caBundle":{},"f:service":{}}}`:                                       false,
		`{}`: false,
	} {
		var m map[string]any
		if err := json.Unmarshal([]byte(fields), &m); err != nil {
			t.Fatal(err)
		}
		if got := onlyCABundle(m); got != want {
			t.Errorf("onlyCABundle(%s) = %v, want %v", fields, got, want)
		}
	}
}

func TestForeignClaims(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        string
	}{
		{map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}, ""},
		{map[string]string{"cert-manager.io/inject-ca-from": "ns/cert"}, "cert-manager.io/inject-ca-from"},
		{map[string]string{"cert-manager.io/inject-ca-from-secret": "ns/s", "cert-manager.io/inject-apiserver-ca": "true"},
			"cert-manager.io/inject-apiserver-ca,cert-manager.io/inject-ca-from-secret"},
		{map[string]string{"service.beta.openshift.io/inject-cabundle": "true"}, "service.beta.openshift.io/inject-cabundle"},
		{map[string]string{"cert-manager.io/issuer": "x"}, ""},
	} {
		if got := strings.Join(foreignClaims(tc.annotations), ","); got != tc.want {
			t.Errorf("foreignClaims(%v) = %q, want %q", tc.annotations, got, tc.want)
		}
	}
	msg := refusal(KindValidatingWebhookConfiguration, "w", []string{"cert-manager.io/inject-ca-from"})
	for _, s := range []string{"ValidatingWebhookConfiguration w", "cert-manager.io/inject-ca-from", certapiv1alpha1.AnnotationInjectCABundle, "remove"} {
		if !strings.Contains(msg, s) {
			t.Errorf("refusal %q does not mention %q", msg, s)
		}
	}
}
