package injector

import (
	"context"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// Kind is a kind of object that can opt in to caBundle injection.
type Kind string

// The kinds that can opt in.
const (
	KindValidatingWebhookConfiguration Kind = "ValidatingWebhookConfiguration"
	KindMutatingWebhookConfiguration   Kind = "MutatingWebhookConfiguration"
	KindCustomResourceDefinition       Kind = "CustomResourceDefinition"
	KindAPIService                     Kind = "APIService"
)

// Kinds lists the kinds, in the order Summary reports them.
var Kinds = []Kind{KindValidatingWebhookConfiguration, KindMutatingWebhookConfiguration, KindCustomResourceDefinition, KindAPIService}

// kindClient reads and patches one kind, returning observations. Every kind is cluster-scoped.
type kindClient struct {
	kind       Kind
	gvr        schema.GroupVersionResource
	apiVersion string
	get        func(ctx context.Context, name string) (*observation, error)
	patch      func(ctx context.Context, name string, patch []byte) (*observation, error)
}

func newKindClients(kube kubernetes.Interface, ext apiextensionsclient.Interface, agg aggregatorclient.Interface) map[Kind]*kindClient {
	opts := metav1.PatchOptions{FieldManager: FieldManager}
	vwc := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	mwc := kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	crd := ext.ApiextensionsV1().CustomResourceDefinitions()
	aps := agg.ApiregistrationV1().APIServices()
	return map[Kind]*kindClient{
		KindValidatingWebhookConfiguration: {
			kind:       KindValidatingWebhookConfiguration,
			gvr:        admissionregistrationv1.SchemeGroupVersion.WithResource("validatingwebhookconfigurations"),
			apiVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			get: func(ctx context.Context, name string) (*observation, error) {
				o, err := vwc.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				return observeValidating(o), nil
			},
			patch: func(ctx context.Context, name string, patch []byte) (*observation, error) {
				o, err := vwc.Patch(ctx, name, types.JSONPatchType, patch, opts)
				if err != nil {
					return nil, err
				}
				return observeValidating(o), nil
			},
		},
		KindMutatingWebhookConfiguration: {
			kind:       KindMutatingWebhookConfiguration,
			gvr:        admissionregistrationv1.SchemeGroupVersion.WithResource("mutatingwebhookconfigurations"),
			apiVersion: admissionregistrationv1.SchemeGroupVersion.String(),
			get: func(ctx context.Context, name string) (*observation, error) {
				o, err := mwc.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				return observeMutating(o), nil
			},
			patch: func(ctx context.Context, name string, patch []byte) (*observation, error) {
				o, err := mwc.Patch(ctx, name, types.JSONPatchType, patch, opts)
				if err != nil {
					return nil, err
				}
				return observeMutating(o), nil
			},
		},
		KindCustomResourceDefinition: {
			kind:       KindCustomResourceDefinition,
			gvr:        apiextensionsv1.SchemeGroupVersion.WithResource("customresourcedefinitions"),
			apiVersion: apiextensionsv1.SchemeGroupVersion.String(),
			get: func(ctx context.Context, name string) (*observation, error) {
				o, err := crd.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				return observeCRD(o), nil
			},
			patch: func(ctx context.Context, name string, patch []byte) (*observation, error) {
				o, err := crd.Patch(ctx, name, types.JSONPatchType, patch, opts)
				if err != nil {
					return nil, err
				}
				return observeCRD(o), nil
			},
		},
		KindAPIService: {
			kind:       KindAPIService,
			gvr:        apiregistrationv1.SchemeGroupVersion.WithResource("apiservices"),
			apiVersion: apiregistrationv1.SchemeGroupVersion.String(),
			get: func(ctx context.Context, name string) (*observation, error) {
				o, err := aps.Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				return observeAPIService(o), nil
			},
			patch: func(ctx context.Context, name string, patch []byte) (*observation, error) {
				o, err := aps.Patch(ctx, name, types.JSONPatchType, patch, opts)
				if err != nil {
					return nil, err
				}
				return observeAPIService(o), nil
			},
		},
	}
}
