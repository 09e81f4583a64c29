package injector

import (
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// KindAPIService: spec.caBundle, unless the APIService is local or insecureSkipTLSVerify.
const KindAPIService Kind = "APIService"

var apiServices = &kindSpec{
	kind: KindAPIService,
	gvr:  apiregistrationv1.SchemeGroupVersion.WithResource("apiservices"),
	newAccessor: func(c clientsets) accessor {
		return newTypedAccessor(c.agg.ApiregistrationV1().APIServices(), observeAPIService)
	},
}

// observeAPIService: spec.caBundle; skipped when local or insecureSkipTLSVerify.
func observeAPIService(o *apiregistrationv1.APIService) *observation {
	obs, owners := newObservation(&o.ObjectMeta)
	switch {
	case o.Spec.Service == nil:
		obs.Skip = "it is a local APIService (no spec.service)"
	case o.Spec.InsecureSkipTLSVerify:
		obs.Skip = "spec.insecureSkipTLSVerify is true; set it to false to have spec.caBundle injected"
	default:
		obs.addSlot(slot{
			Path:      "/spec/caBundle",
			fieldPath: []string{"f:spec", "f:caBundle"},
			service:   serviceRef(o.Spec.Service.Namespace, o.Spec.Service.Name, o.Spec.Service.Port),
		}, o.Spec.CABundle)
	}
	setOwners(obs, owners)
	return obs
}
