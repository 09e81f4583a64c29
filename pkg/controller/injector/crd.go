package injector

import (
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KindCustomResourceDefinition: spec.conversion.webhook.clientConfig.caBundle, with strategy Webhook
// and a service.
const KindCustomResourceDefinition Kind = "CustomResourceDefinition"

var customResourceDefinitions = &kindSpec{
	kind: KindCustomResourceDefinition,
	gvr:  apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"),
	newAccessor: func(c clientsets) accessor {
		return newTypedAccessor(c.ext.ApiextensionsV1().CustomResourceDefinitions(), observeCRD)
	},
}

// observeCRD: spec.conversion.webhook.clientConfig.caBundle, only with strategy Webhook and a
// service. A server-side apply owner of spec.conversion makes certapi give up its managedFields
// entry after writing (see observation.release).
func observeCRD(o *apiextensionsv1.CustomResourceDefinition) *observation {
	obs, owners := newObservation(&o.ObjectMeta)
	conv := o.Spec.Conversion
	switch {
	case conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter:
		strategy := apiextensionsv1.NoneConverter
		if conv != nil && conv.Strategy != "" {
			strategy = conv.Strategy
		}
		obs.Skip = fmt.Sprintf("spec.conversion.strategy is %s; only a Webhook conversion has a caBundle", strategy)
	case conv.Webhook == nil || conv.Webhook.ClientConfig == nil:
		obs.Skip = "spec.conversion.webhook.clientConfig is not set"
	case conv.Webhook.ClientConfig.Service == nil:
		obs.Skip = "the conversion webhook has a url, not a service; webhooks with a url are left alone"
	default:
		obs.addSlot(slot{
			Path:      "/spec/conversion/webhook/clientConfig/caBundle",
			fieldPath: []string{"f:spec", "f:conversion", "f:webhook", "f:clientConfig", "f:caBundle"},
			service:   serviceRef(conv.Webhook.ClientConfig.Service.Namespace, conv.Webhook.ClientConfig.Service.Name, conv.Webhook.ClientConfig.Service.Port),
		}, conv.Webhook.ClientConfig.CABundle)
	}
	setOwners(obs, owners)
	for _, e := range owners {
		if e.operation == metav1.ManagedFieldsOperationApply && hasPath(e.fields, []string{"f:spec", "f:conversion"}) {
			obs.appliedBy = append(obs.appliedBy, e.manager)
		}
	}
	obs.release = len(obs.appliedBy) > 0
	return obs
}
