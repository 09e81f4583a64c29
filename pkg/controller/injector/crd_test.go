package injector

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cabundle"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

func crdWith(conv *apiextensionsv1.CustomResourceConversion, managed ...metav1.ManagedFieldsEntry) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "foos.example.com", ResourceVersion: "9", ManagedFields: managed},
		Spec:       apiextensionsv1.CustomResourceDefinitionSpec{Conversion: conv},
	}
}

func TestObserveCRD(t *testing.T) {
	bundle := signertest.Bundle(t, 1)
	d := digestOf(bundle)
	webhook := func(cc apiextensionsv1.WebhookClientConfig) *apiextensionsv1.CustomResourceConversion {
		return &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook:  &apiextensionsv1.WebhookConversion{ClientConfig: &cc, ConversionReviewVersions: []string{"v1"}},
		}
	}
	svcRef := &apiextensionsv1.ServiceReference{Namespace: "ns", Name: "svc"}

	for name, conv := range map[string]*apiextensionsv1.CustomResourceConversion{
		"no conversion": nil,
		"None":          {Strategy: apiextensionsv1.NoneConverter},
		"url":           webhook(apiextensionsv1.WebhookClientConfig{URL: ptr("https://example.com")}),
		"no config":     {Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{}},
	} {
		if obs := observeCRD(crdWith(conv)); obs.Skip == "" || len(obs.Slots) != 0 {
			t.Errorf("%s: skip %q, %d slots", name, obs.Skip, len(obs.Slots))
		}
	}

	obs := observeCRD(crdWith(webhook(apiextensionsv1.WebhookClientConfig{Service: svcRef})))
	if obs.Skip != "" || len(obs.Slots) != 1 || obs.Slots[0].Path != "/spec/conversion/webhook/clientConfig/caBundle" {
		t.Fatalf("webhook conversion: %+v", obs)
	}
	p := decide(obs, bundle, d, nil)
	ops := decodePatch(t, p.patch)
	if len(ops) != 2 || ops[0].Op != "test" || ops[0].Value != "9" || ops[1].Path != "/spec/conversion/webhook/clientConfig/caBundle" {
		t.Errorf("ops = %+v", ops)
	}

	// Injected, and spec.conversion is applied server-side by its owner: certapi gives up its entry.
	applied := managedEntry("owner", metav1.ManagedFieldsOperationApply, `{"f:spec":{"f:conversion":{"f:strategy":{},"f:webhook":{"f:clientConfig":{"f:service":{"f:name":{}}}}}}}`)
	ours := managedEntry(certapiv1alpha1.FieldManager, metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:conversion":{"f:webhook":{"f:clientConfig":{"f:caBundle":{}}}}}}`)
	status := managedEntry("kube-apiserver", metav1.ManagedFieldsOperationUpdate, `{"f:status":{"f:conditions":{}}}`)
	status.Subresource = "status"
	injected := webhook(apiextensionsv1.WebhookClientConfig{Service: svcRef, CABundle: bundle})
	obs = observeCRD(crdWith(injected, applied, status, ours))
	if !obs.release || obs.certapiEntry != 2 || !obs.certapiOnlyCABundle || strings.Join(obs.appliedBy, ",") != "owner" {
		t.Fatalf("observation = %+v", obs)
	}
	p = decide(obs, bundle, d, nil)
	if !p.upToDate || p.patch != nil || p.release == nil {
		t.Fatalf("plan = %+v", p)
	}
	ops = decodePatch(t, p.release)
	want := []cabundle.Op{
		{Op: "test", Path: "/metadata/resourceVersion", Value: "9"},
		{Op: "test", Path: "/metadata/managedFields/2/manager", Value: "certapi"},
		{Op: "test", Path: "/metadata/managedFields/2/operation", Value: "Update"},
		{Op: "remove", Path: "/metadata/managedFields/2"},
	}
	if len(ops) != len(want) {
		t.Fatalf("release ops = %+v", ops)
	}
	for n := range want {
		if ops[n] != want[n] {
			t.Errorf("release op %d = %+v, want %+v", n, ops[n], want[n])
		}
	}

	// Not yet injected: write first; the release comes after, from the patch response.
	obs = observeCRD(crdWith(webhook(apiextensionsv1.WebhookClientConfig{Service: svcRef}), applied, ours))
	if p := decide(obs, bundle, d, nil); p.patch == nil || p.release != nil {
		t.Errorf("not injected: plan = %+v", p)
	}
	// Owned by an update-style manager (Helm 3, client-side kubectl, Argo CD without SSA): certapi keeps
	// its entry, which Argo CD's managedFieldsManagers: [certapi] relies on.
	updated := managedEntry("helm", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:conversion":{"f:strategy":{}}}}`)
	if obs := observeCRD(crdWith(injected, updated, ours)); obs.release {
		t.Error("release with no server-side apply owner")
	}
	// certapi's entry owns something besides caBundle: never removed.
	wide := managedEntry(certapiv1alpha1.FieldManager, metav1.ManagedFieldsOperationUpdate, `{"f:metadata":{"f:labels":{"f:x":{}}},"f:spec":{"f:conversion":{"f:webhook":{"f:clientConfig":{"f:caBundle":{}}}}}}`)
	if p := decide(observeCRD(crdWith(injected, applied, wide)), bundle, d, nil); p.release != nil {
		t.Error("released an entry that owns more than caBundle")
	}
}
