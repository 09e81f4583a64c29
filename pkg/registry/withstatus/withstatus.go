// Package withstatus holds what the storage of a certapi kind with a status subresource shares, whatever
// the kind: the rules of its strategy that do not depend on the kind (writes to the main resource reset
// status, writes to the status subresource reset spec, updates never create), and the status
// subresource's storage over a copy of the main resource's store. Each kind's registry keeps what
// differs: scope, defaulting, validation, selectable fields and its table.
package withstatus

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// apiVersion is the version whose fields server-side apply tracks.
const apiVersion = certapiv1alpha1.APIVersion

// Strategy is the part of a kind's strategy that every certapi kind shares: it types objects with the
// scheme, generates names for generateName, and on the main resource resets status, allows no create on
// update, allows updates without a resourceVersion, canonicalises nothing and warns of nothing. A kind's
// strategy embeds it and adds scope, PrepareForCreate, PrepareForUpdate, Validate and ValidateUpdate.
type Strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the shared part of a strategy over typer.
func NewStrategy(typer runtime.ObjectTyper) Strategy {
	return Strategy{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator}
}

// GetResetFields says that writes to the main resource never change status; server-side apply needs it
// to attribute fields correctly.
func (Strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return resetFields("status")
}

// WarningsOnCreate returns no warnings.
func (Strategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string { return nil }

// AllowCreateOnUpdate is false: an update of a missing object is NotFound.
func (Strategy) AllowCreateOnUpdate(ctx context.Context) bool { return false }

// AllowUnconditionalUpdate is true: an update without a resourceVersion is applied.
func (Strategy) AllowUnconditionalUpdate(ctx context.Context) bool { return true }

// Canonicalize changes nothing.
func (Strategy) Canonicalize(obj runtime.Object) {}

// WarningsOnUpdate returns no warnings.
func (Strategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string { return nil }

// StatusResetFields is what a status subresource's GetResetFields returns: its writes never change spec.
func StatusResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return resetFields("spec")
}

func resetFields(path string) map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		apiVersion: fieldpath.NewSet(fieldpath.MakePathOrDie(path)),
	}
}

// StatusStrategy is the update strategy of a status subresource, which also says which fields its writes
// reset.
type StatusStrategy interface {
	rest.RESTUpdateStrategy
	rest.ResetFieldsStrategy
}

// StatusREST is the storage of a status subresource: it reads the object and updates its status only
// (status's strategy keeps spec and metadata as stored), and never creates.
type StatusREST struct {
	store *genericregistry.Store
}

// NewStatusREST returns the storage of the status subresource of the main resource's completed store:
// a copy of it that updates with status.
func NewStatusREST(store *genericregistry.Store, status StatusStrategy) *StatusREST {
	statusStore := *store
	statusStore.UpdateStrategy = status
	statusStore.ResetFieldsStrategy = status
	return &StatusREST{store: &statusStore}
}

// New returns an empty object of the kind.
func (r *StatusREST) New() runtime.Object { return r.store.NewFunc() }

// Destroy does nothing: the main resource's storage owns the shared etcd client.
func (r *StatusREST) Destroy() {}

// Get returns the object, so that clients can read before they write status.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes status only; spec and metadata changes in the body are dropped.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// The status subresource never creates: an object must exist before it has a status.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields tells server-side apply which fields a status write resets.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints the object as `kubectl get` does.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
