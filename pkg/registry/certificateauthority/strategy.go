// Package certificateauthority is the REST storage of the cluster's one CertificateAuthority and its
// status subresource. It holds only the CA's public face; private keys are stored elsewhere and never served.
package certificateauthority

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
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/apis/certapi/validation"
	"github.com/certapi/certapi/pkg/registry/withstatus"
)

type strategy struct {
	withstatus.Strategy
}

// NewStrategy returns the create, update and delete rules of the CertificateAuthority.
func NewStrategy(typer runtime.ObjectTyper) strategy {
	return strategy{withstatus.NewStrategy(typer)}
}

func (strategy) NamespaceScoped() bool { return false }

func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	ca := obj.(*certapi.CertificateAuthority)
	ca.Status = certapi.CertificateAuthorityStatus{}
	ca.Generation = 1
}

func (strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newCA := obj.(*certapi.CertificateAuthority)
	oldCA := old.(*certapi.CertificateAuthority)
	newCA.Status = oldCA.Status
	newCA.Status.Leader = nil // filled at each read, never stored
	if !apiequality.Semantic.DeepEqual(newCA.Spec, oldCA.Spec) {
		newCA.Generation = oldCA.Generation + 1
	}
}

func (strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateCertificateAuthority(obj.(*certapi.CertificateAuthority))
}

func (strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateCertificateAuthorityUpdate(obj.(*certapi.CertificateAuthority), old.(*certapi.CertificateAuthority))
}

type statusStrategy struct {
	strategy
}

// GetResetFields: a status write changes no spec, and no status.leader, which is read at each request
// and never stored.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	fields := withstatus.StatusResetFields()
	fields[v1alpha1.APIVersion].Insert(fieldpath.MakePathOrDie("status", "leader"))
	return fields
}

func (statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newCA := obj.(*certapi.CertificateAuthority)
	oldCA := old.(*certapi.CertificateAuthority)
	newCA.Spec = oldCA.Spec
	newCA.Labels = oldCA.Labels
	newCA.Annotations = oldCA.Annotations
	// status.leader is read from the leader election at each request: a value written would go stale.
	newCA.Status.Leader = nil
}

func (statusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateCertificateAuthorityStatusUpdate(obj.(*certapi.CertificateAuthority), old.(*certapi.CertificateAuthority))
}

// GetAttrs returns the labels and fields a list or watch can select by.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	ca, ok := obj.(*certapi.CertificateAuthority)
	if !ok {
		return nil, nil, fmt.Errorf("not a CertificateAuthority: %T", obj)
	}
	return ca.Labels, generic.ObjectMetaFieldsSet(&ca.ObjectMeta, false), nil
}

// Match returns the matcher for a label and field selector.
func Match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
