package injector

import (
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/signer/signertest"
)

func TestObserveWebhooks(t *testing.T) {
	bundle := signertest.Bundle(t, 1)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "w", UID: "u1", ResourceVersion: "7"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "a.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc()}},
			{Name: "url.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr("https://example.com/x")}},
			{Name: "b.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: bundle}},
		},
	}
	obs := observeValidating(vwc)
	if obs.Skip != "" || len(obs.Slots) != 2 {
		t.Fatalf("skip %q, %d slots; want 2 slots", obs.Skip, len(obs.Slots))
	}
	if s := obs.Slots[0]; s.Name != "a.example.com" || s.Path != "/webhooks/0/clientConfig/caBundle" || s.Digest != digestOf(nil) {
		t.Errorf("slot 0 = %+v", s)
	}
	if s := obs.Slots[1]; s.Name != "b.example.com" || s.Path != "/webhooks/2/clientConfig/caBundle" || s.Digest != digestOf(bundle) {
		t.Errorf("slot 1 = %+v", s)
	}
	if want := []string{"f:webhooks", `k:{"name":"b.example.com"}`, "f:clientConfig", "f:caBundle"}; strings.Join(obs.Slots[1].fieldPath, "|") != strings.Join(want, "|") {
		t.Errorf("fieldPath = %q, want %q", obs.Slots[1].fieldPath, want)
	}

	urlOnly := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "m"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "url.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr("https://example.com/x")}},
		},
	}
	if obs := observeMutating(urlOnly); !strings.Contains(obs.Skip, "url") || len(obs.Slots) != 0 {
		t.Errorf("url-only: skip %q, slots %d", obs.Skip, len(obs.Slots))
	}
	if obs := observeMutating(&admissionregistrationv1.MutatingWebhookConfiguration{}); obs.Skip == "" {
		t.Error("no webhooks: not skipped")
	}
}
