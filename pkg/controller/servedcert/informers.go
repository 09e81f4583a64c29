package servedcert

import (
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/certapi/certapi/pkg/controller/injector"
)

// serviceIndex indexes EndpointSlices by "<namespace>/<service>" (label kubernetes.io/service-name).
const serviceIndex = "service"

// sliceService is serviceIndex's index function.
func sliceService(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, fmt.Errorf("expected an EndpointSlice, got %T", obj)
	}
	name, ok := s.Labels[discoveryv1.LabelServiceName]
	if !ok {
		return nil, nil
	}
	return []string{s.Namespace + "/" + name}, nil
}

// trim is the informers' transform: the cache keeps of every Service and EndpointSlice in the cluster
// only what Resolve reads (a Service's type, ports and externalName; a slice's Service, address type,
// ports, and each endpoint's addresses and readiness), so that watching them all costs little.
func trim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		return &corev1.Service{
			ObjectMeta: trimMeta(&o.ObjectMeta, nil),
			Spec:       corev1.ServiceSpec{Type: o.Spec.Type, Ports: o.Spec.Ports, ExternalName: o.Spec.ExternalName},
		}, nil
	case *discoveryv1.EndpointSlice:
		out := &discoveryv1.EndpointSlice{
			ObjectMeta:  trimMeta(&o.ObjectMeta, map[string]string{discoveryv1.LabelServiceName: o.Labels[discoveryv1.LabelServiceName]}),
			AddressType: o.AddressType,
			Ports:       o.Ports,
			Endpoints:   make([]discoveryv1.Endpoint, len(o.Endpoints)),
		}
		for n, e := range o.Endpoints {
			out.Endpoints[n] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready}}
		}
		return out, nil
	}
	return obj, nil
}

// trimMeta keeps what identifies an object in the cache, and labels.
func trimMeta(m *metav1.ObjectMeta, labels map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion, Labels: labels}
}

// apiVersions are the apiVersions of the kinds a target can be.
var apiVersions = map[injector.Kind]string{
	injector.KindValidatingWebhookConfiguration: admissionregistrationv1.SchemeGroupVersion.String(),
	injector.KindMutatingWebhookConfiguration:   admissionregistrationv1.SchemeGroupVersion.String(),
	injector.KindCustomResourceDefinition:       apiextensionsv1.SchemeGroupVersion.String(),
	injector.KindAPIService:                     apiregistrationv1.SchemeGroupVersion.String(),
}

// regarding is the object an Event about t is about, by reference. Its kinds are cluster-scoped; their
// Events go to namespace default, as the injector's do.
func regarding(t injector.ServedTarget) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: apiVersions[t.Kind], Kind: string(t.Kind)},
		ObjectMeta: metav1.ObjectMeta{Name: t.Name},
	}
}
