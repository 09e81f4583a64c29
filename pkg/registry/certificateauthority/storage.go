package certificateauthority

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/registry/objecttable"
	"github.com/certapi/certapi/pkg/registry/withstatus"
)

// errUndeletable explains why a delete is refused and what to do instead.
var errUndeletable = fmt.Errorf("the in-cluster CA cannot be deleted: every certificate certapi issued chains to it; set spec.forceRotation to rotate it, or spec.distrust to replace it at once")

// REST is the storage of the CertificateAuthority. Deletes are refused. What it answers carries
// status.leader, read from the leader election at each read.
type REST struct {
	*genericregistry.Store
	leader leaderFiller
}

// Get returns the CertificateAuthority with status.leader filled.
func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.Store.Get(ctx, name, options)
	if err != nil {
		return nil, err
	}
	r.leader.fill(ctx, obj)
	return obj, nil
}

// List returns the CertificateAuthorities with status.leader filled.
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	obj, err := r.Store.List(ctx, options)
	if err != nil {
		return nil, err
	}
	r.leader.fill(ctx, obj)
	return obj, nil
}

// Watch sends each event's CertificateAuthority with status.leader as read when the event is sent. A
// change of leader alone is no event.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	w, err := r.Store.Watch(ctx, options)
	if err != nil {
		return nil, err
	}
	return r.leader.watch(ctx, w), nil
}

// Create answers with status.leader filled.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	out, err := r.Store.Create(ctx, obj, createValidation, options)
	if err != nil {
		return nil, err
	}
	r.leader.fill(ctx, out)
	return out, nil
}

// Update answers with status.leader filled; the value in the body is dropped.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	out, created, err := r.Store.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
	if err != nil {
		return nil, false, err
	}
	r.leader.fill(ctx, out)
	return out, created, nil
}

var _ rest.CategoriesProvider = &REST{}

// Categories lets `kubectl get certapi` list it.
func (*REST) Categories() []string { return []string{"certapi"} }

// Delete is refused: deleting the CA would orphan every certificate in the cluster.
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	return nil, false, apierrors.NewForbidden(certapi.Resource("certificateauthorities"), name, errUndeletable)
}

// DeleteCollection is refused for the same reason as Delete.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	return nil, apierrors.NewForbidden(certapi.Resource("certificateauthorities"), "", errUndeletable)
}

// StatusREST is the storage of the status subresource. Its answers carry status.leader as the main
// resource's do; the status written never does.
type StatusREST struct {
	*withstatus.StatusREST
	leader leaderFiller
}

// Get returns the CertificateAuthority with status.leader filled.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	obj, err := r.StatusREST.Get(ctx, name, options)
	if err != nil {
		return nil, err
	}
	r.leader.fill(ctx, obj)
	return obj, nil
}

// Update writes status (without status.leader) and answers with status.leader filled.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	out, created, err := r.StatusREST.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
	if err != nil {
		return nil, false, err
	}
	r.leader.fill(ctx, out)
	return out, created, nil
}

// NewREST returns the storage of the CertificateAuthority and of its status. leader fills status.leader
// (and so the table's Leader column) at each read; nil makes it Unknown.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, leader LeaderFunc) (*REST, *StatusREST, error) {
	s := NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &certapi.CertificateAuthority{} },
		NewListFunc:               func() runtime.Object { return &certapi.CertificateAuthorityList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  certapi.Resource("certificateauthorities"),
		SingularQualifiedResource: certapi.Resource("certificateauthority"),

		CreateStrategy:      s,
		UpdateStrategy:      s,
		DeleteStrategy:      s,
		ResetFieldsStrategy: s,

		TableConvertor: tableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, nil, fmt.Errorf("completing CertificateAuthority storage: %w", err)
	}
	filler := leaderFiller{leader: leader}
	return &REST{Store: store, leader: filler}, &StatusREST{StatusREST: withstatus.NewStatusREST(store, statusStrategy{s}), leader: filler}, nil
}

// tableConvertor prints CertificateAuthorities for `kubectl get`; the Leader column is status.leader.
type tableConvertor struct{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the CA (always default)."},
	{Name: "Ready", Type: "string", Description: "The Ready condition's status."},
	{Name: "Rotating", Type: "string", Description: "The Rotating condition's status."},
	{Name: "Active", Type: "string", Description: "Serial number of the CA that signs now."},
	{Name: "Not After", Type: "string", Format: "date-time", Description: "When the Active CA expires."},
	{Name: "Leader", Type: "string", Description: "status.leader: the certapi replica that leads now (holds the CA key and signs), read at each request; <none> when no replica does, <unknown> when the election could not be read."},
	{Name: "Age", Type: "string", Description: "Time since the CA object was created."},
}

func (c tableConvertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table, items, err := objecttable.New(obj, tableOptions, columns, "CertificateAuthority",
		func(l *certapi.CertificateAuthorityList) []certapi.CertificateAuthority { return l.Items })
	if err != nil {
		return nil, err
	}
	now := time.Now()
	for i := range items {
		ca := &items[i]
		status := func(t string) string {
			for _, c := range ca.Status.Conditions {
				if c.Type == t {
					return string(c.Status)
				}
			}
			return "Unknown"
		}
		active, notAfter := "<none>", "<none>"
		if ca.Status.Active != nil {
			active = ca.Status.Active.SerialNumber
			for _, c := range ca.Status.Certificates {
				if c.Role == certapi.CARoleActive {
					notAfter = c.NotAfter.UTC().Format(time.RFC3339)
				}
			}
		}
		table.Rows = append(table.Rows, metav1.TableRow{
			Cells:  []interface{}{ca.Name, status(certapi.ConditionReady), status(certapi.ConditionRotating), active, notAfter, leaderCell(ca.Status.Leader), duration.HumanDuration(now.Sub(ca.CreationTimestamp.Time))},
			Object: runtime.RawExtension{Object: ca},
		})
	}
	return table, nil
}
