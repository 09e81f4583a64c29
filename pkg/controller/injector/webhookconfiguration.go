package injector

import (
	"encoding/json"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ValidatingWebhookConfigurations and MutatingWebhookConfigurations: every webhooks[] entry whose
// clientConfig names a service.
const (
	KindValidatingWebhookConfiguration Kind = "ValidatingWebhookConfiguration"
	KindMutatingWebhookConfiguration   Kind = "MutatingWebhookConfiguration"
)

var validatingWebhookConfigurations = &kindSpec{
	kind: KindValidatingWebhookConfiguration,
	gvr:  admissionregistrationv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations"),
	newAccessor: func(c clientsets) accessor {
		return newTypedAccessor(c.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations(), observeValidating)
	},
}

var mutatingWebhookConfigurations = &kindSpec{
	kind: KindMutatingWebhookConfiguration,
	gvr:  admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations"),
	newAccessor: func(c clientsets) accessor {
		return newTypedAccessor(c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations(), observeMutating)
	},
}

// webhookEntry is one webhooks[] entry of a Validating- or MutatingWebhookConfiguration.
type webhookEntry struct {
	name   string
	config *admissionregistrationv1.WebhookClientConfig
}

func observeValidating(o *admissionregistrationv1.ValidatingWebhookConfiguration) *observation {
	entries := make([]webhookEntry, len(o.Webhooks))
	for i := range o.Webhooks {
		entries[i] = webhookEntry{name: o.Webhooks[i].Name, config: &o.Webhooks[i].ClientConfig}
	}
	return observeWebhooks(&o.ObjectMeta, entries)
}

func observeMutating(o *admissionregistrationv1.MutatingWebhookConfiguration) *observation {
	entries := make([]webhookEntry, len(o.Webhooks))
	for i := range o.Webhooks {
		entries[i] = webhookEntry{name: o.Webhooks[i].Name, config: &o.Webhooks[i].ClientConfig}
	}
	return observeWebhooks(&o.ObjectMeta, entries)
}

// observeWebhooks: every entry whose clientConfig names a service is a slot; url entries are left
// alone, and an object with no service entry at all is skipped.
func observeWebhooks(m *metav1.ObjectMeta, entries []webhookEntry) *observation {
	obs, owners := newObservation(m)
	for i, e := range entries {
		if e.config == nil || e.config.Service == nil {
			continue
		}
		key, _ := json.Marshal(map[string]string{"name": e.name})
		obs.addSlot(slot{
			Name:      e.name,
			Path:      fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i),
			fieldPath: []string{"f:webhooks", "k:" + string(key), "f:clientConfig", "f:caBundle"},
			service:   serviceRef(e.config.Service.Namespace, e.config.Service.Name, e.config.Service.Port),
		}, e.config.CABundle)
	}
	setOwners(obs, owners)
	switch {
	case len(entries) == 0:
		obs.Skip = "it has no webhooks"
	case len(obs.Slots) == 0:
		obs.Skip = fmt.Sprintf("none of its %d webhooks names a service in clientConfig; webhooks with a url are left alone", len(entries))
	}
	return obs
}
