package servingcertrequest

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

// REST is the storage of ServingCertRequests in etcd.
type REST struct {
	*genericregistry.Store
}

var (
	_ rest.ShortNamesProvider = &REST{}
	_ rest.CategoriesProvider = &REST{}
)

// ShortNames lets `kubectl get scr` work.
func (*REST) ShortNames() []string { return []string{"scr"} }

// Categories lets `kubectl get certapi` list every certapi object.
func (*REST) Categories() []string { return []string{"certapi"} }

// StatusREST is the storage of the status subresource: it updates status and nothing else.
type StatusREST struct {
	store *genericregistry.Store
}

// NewREST returns the storage of ServingCertRequests and of their status, validating SANs against
// clusterDomain.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, clusterDomain string) (*REST, *StatusREST, error) {
	strategy := NewStrategy(scheme, clusterDomain)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &certapi.ServingCertRequest{} },
		NewListFunc:               func() runtime.Object { return &certapi.ServingCertRequestList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  certapi.Resource("servingcertrequests"),
		SingularQualifiedResource: certapi.Resource("servingcertrequest"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: tableConvertor{},
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}
	if err := store.CompleteWithOptions(options); err != nil {
		return nil, nil, fmt.Errorf("completing ServingCertRequest storage: %w", err)
	}

	statusStore := *store
	status := NewStatusStrategy(strategy)
	statusStore.UpdateStrategy = status
	statusStore.ResetFieldsStrategy = status
	return &REST{Store: store}, &StatusREST{store: &statusStore}, nil
}

// New returns an empty ServingCertRequest.
func (r *StatusREST) New() runtime.Object { return &certapi.ServingCertRequest{} }

// Destroy does nothing: the main resource's storage owns the shared etcd client.
func (r *StatusREST) Destroy() {}

// Get returns the request, so clients can read before they write status.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes status only; spec and metadata changes in the body are dropped.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// The status subresource never creates: a request must exist before it has a status.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields tells server-side apply which fields a status write resets.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints the request as `kubectl get` does.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
