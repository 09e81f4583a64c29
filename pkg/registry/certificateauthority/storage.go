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
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/registry/objecttable"
	"github.com/certapi/certapi/pkg/registry/withstatus"
)

// errUndeletable explains why a delete is refused and what to do instead.
var errUndeletable = fmt.Errorf("the in-cluster CA cannot be deleted: every certificate certapi issued chains to it; set spec.forceRotation to rotate it, or spec.distrust to replace it at once")

// REST is the storage of the CertificateAuthority. Deletes are refused.
type REST struct {
	*genericregistry.Store
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

// StatusREST is the storage of the status subresource.
type StatusREST struct {
	*withstatus.StatusREST
}

// LeaderFunc names the replica that holds the leader election now; ok is false when none does. The
// table's Leader column calls it on every read, so that `kubectl get certificateauthority` and
// `kubectl certapi check` see who leads now, not what was last written.
type LeaderFunc func(ctx context.Context) (identity string, ok bool, err error)

// NewREST returns the storage of the CertificateAuthority and of its status. leader, when not nil, fills
// the table's Leader column.
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

		TableConvertor: tableConvertor{leader: leader},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, nil, fmt.Errorf("completing CertificateAuthority storage: %w", err)
	}
	return &REST{Store: store}, &StatusREST{withstatus.NewStatusREST(store, statusStrategy{s})}, nil
}

type tableConvertor struct {
	leader LeaderFunc
}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the CA (always default)."},
	{Name: "Ready", Type: "string", Description: "The Ready condition's status."},
	{Name: "Rotating", Type: "string", Description: "The Rotating condition's status."},
	{Name: "Active", Type: "string", Description: "Serial number of the CA that signs now."},
	{Name: "Not After", Type: "string", Format: "date-time", Description: "When the Active CA expires."},
	{Name: "Leader", Type: "string", Description: "The certapi replica that leads now (holds the CA key and signs), read at each request; <none> when no replica does."},
	{Name: "Age", Type: "string", Description: "Time since the CA object was created."},
}

func (c tableConvertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table, items, err := objecttable.New(obj, tableOptions, columns, "CertificateAuthority",
		func(l *certapi.CertificateAuthorityList) []certapi.CertificateAuthority { return l.Items })
	if err != nil {
		return nil, err
	}
	now := time.Now()
	leader := ""
	if len(items) > 0 {
		leader = c.leaderCell(ctx)
	}
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
			Cells:  []interface{}{ca.Name, status(certapi.ConditionReady), status("Rotating"), active, notAfter, leader, duration.HumanDuration(now.Sub(ca.CreationTimestamp.Time))},
			Object: runtime.RawExtension{Object: ca},
		})
	}
	return table, nil
}

// leaderCell is the Leader column: the identity of the replica that leads, <none>, or <unknown> when the
// election could not be read.
func (c tableConvertor) leaderCell(ctx context.Context) string {
	if c.leader == nil {
		return "<unknown>"
	}
	id, ok, err := c.leader(ctx)
	switch {
	case err != nil:
		klog.FromContext(ctx).Error(err, "Reading the leader election for the CertificateAuthority table")
		return "<unknown>"
	case !ok:
		return "<none>"
	}
	return id
}
