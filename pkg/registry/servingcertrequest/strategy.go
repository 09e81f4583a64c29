// Package servingcertrequest is the REST storage of ServingCertRequests and their status subresource.
package servingcertrequest

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/validation"
	"github.com/certapi/certapi/pkg/registry/withstatus"
)

// strategy holds the create, update and delete rules of ServingCertRequests.
type strategy struct {
	withstatus.Strategy
	clusterDomain string
}

// NewStrategy returns the strategy for ServingCertRequests, validating SANs against clusterDomain.
func NewStrategy(typer runtime.ObjectTyper, clusterDomain string) strategy {
	return strategy{Strategy: withstatus.NewStrategy(typer), clusterDomain: clusterDomain}
}

func (strategy) NamespaceScoped() bool { return true }

func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	scr := obj.(*certapi.ServingCertRequest)
	scr.Status = certapi.ServingCertRequestStatus{}
	scr.Generation = 1
	scr.Spec.DNSNames = validation.NormalizeDNSNames(scr.Spec.DNSNames)
}

func (strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newSCR := obj.(*certapi.ServingCertRequest)
	oldSCR := old.(*certapi.ServingCertRequest)
	newSCR.Status = oldSCR.Status
	newSCR.Spec.DNSNames = validation.NormalizeDNSNames(newSCR.Spec.DNSNames)
	if !apiequality.Semantic.DeepEqual(newSCR.Spec, oldSCR.Spec) {
		newSCR.Generation = oldSCR.Generation + 1
	}
}

func (s strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateServingCertRequest(obj.(*certapi.ServingCertRequest), s.clusterDomain)
}

func (s strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateServingCertRequestUpdate(obj.(*certapi.ServingCertRequest), old.(*certapi.ServingCertRequest), s.clusterDomain)
}

// statusStrategy holds the rules of the status subresource: it changes status and nothing else.
type statusStrategy struct {
	strategy
}

// NewStatusStrategy returns the strategy for the status subresource.
func NewStatusStrategy(s strategy) statusStrategy {
	return statusStrategy{s}
}

func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return withstatus.StatusResetFields()
}

func (statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newSCR := obj.(*certapi.ServingCertRequest)
	oldSCR := old.(*certapi.ServingCertRequest)
	newSCR.Spec = oldSCR.Spec
	// Status writers may not touch labels, annotations or the rest of the metadata either.
	newSCR.Labels = oldSCR.Labels
	newSCR.Annotations = oldSCR.Annotations
}

func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateServingCertRequestStatusUpdate(obj.(*certapi.ServingCertRequest), old.(*certapi.ServingCertRequest))
}

// GetAttrs returns the labels and fields a list or watch can select ServingCertRequests by.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	scr, ok := obj.(*certapi.ServingCertRequest)
	if !ok {
		return nil, nil, fmt.Errorf("not a ServingCertRequest: %T", obj)
	}
	return scr.Labels, SelectableFields(scr), nil
}

// SelectableFields adds spec.serviceName and spec.secretName to the standard metadata fields, so that
// controllers can find the request behind a Service or a Secret with a field selector.
func SelectableFields(obj *certapi.ServingCertRequest) fields.Set {
	return generic.MergeFieldsSets(generic.ObjectMetaFieldsSet(&obj.ObjectMeta, true), fields.Set{
		"spec.serviceName": obj.Spec.ServiceName,
		"spec.secretName":  obj.Spec.SecretName,
	})
}

// Match returns the matcher for a label and field selector.
func Match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
