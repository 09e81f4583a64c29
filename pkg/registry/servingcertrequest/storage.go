package servingcertrequest

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/registry/withstatus"
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
	*withstatus.StatusREST
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
	return &REST{Store: store}, &StatusREST{withstatus.NewStatusREST(store, NewStatusStrategy(strategy))}, nil
}
