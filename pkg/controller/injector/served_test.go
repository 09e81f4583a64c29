package injector

import (
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/certapi/certapi/pkg/servedcert"
)

// TestServiceRefs: each kind's slot knows the Service kube-apiserver dials with it, and its port (443
// when the reference names none), which the served certificate check probes.
func TestServiceRefs(t *testing.T) {
	port := int32(8443)
	vwc := observeValidating(&admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "w"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "a.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "a"}}},
			{Name: "b.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "b", Port: &port}}},
		},
	})
	crd := observeCRD(&apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{Conversion: &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter,
		Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{
			Service: &apiextensionsv1.ServiceReference{Namespace: "ns", Name: "conv", Port: &port}}},
	}}})
	api := observeAPIService(&apiregistrationv1.APIService{Spec: apiregistrationv1.APIServiceSpec{
		Service: &apiregistrationv1.ServiceReference{Namespace: "ns", Name: "api"}}})
	for _, tc := range []struct {
		obs  *observation
		slot int
		want servedcert.ServiceRef
	}{
		{vwc, 0, servedcert.ServiceRef{Namespace: "ns", Name: "a", Port: servedcert.DefaultServicePort}},
		{vwc, 1, servedcert.ServiceRef{Namespace: "ns", Name: "b", Port: 8443}},
		{crd, 0, servedcert.ServiceRef{Namespace: "ns", Name: "conv", Port: 8443}},
		{api, 0, servedcert.ServiceRef{Namespace: "ns", Name: "api", Port: servedcert.DefaultServicePort}},
	} {
		if len(tc.obs.Slots) <= tc.slot || tc.obs.Slots[tc.slot].service == nil {
			t.Errorf("want slot %d with Service %+v, got %+v", tc.slot, tc.want, tc.obs.Slots)
			continue
		}
		if got := *tc.obs.Slots[tc.slot].service; got != tc.want {
			t.Errorf("slot %d: Service %+v, want %+v", tc.slot, got, tc.want)
		}
	}
	if got := (servedcert.ServiceRef{Namespace: "ns", Name: "a"}).ServerName(); got != "a.ns.svc" {
		t.Errorf("ServerName %q, want a.ns.svc", got)
	}
}
