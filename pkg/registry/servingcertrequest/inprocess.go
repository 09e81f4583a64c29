package servingcertrequest

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// StatusUpdater writes the status of ServingCertRequests in this process, through the status
// subresource's storage and its strategy (which keeps spec and metadata as stored, and validates), for
// the leader: no request to itself through its loopback, no JSON each way. It applies a change to the
// stored object as the storage reads it, so it never meets a stale resourceVersion: the storage
// retries a write that lost a race with the object it then reads.
//
// Unlike a write through the API it does not record certapi in the object's managed fields, and no
// admission plugin sees it; certapi's admission only guards spec changes.
type StatusUpdater struct {
	status *StatusREST
	scheme *runtime.Scheme
}

// NewStatusUpdater returns a StatusUpdater over the status storage that NewREST made. scheme converts
// between the internal and v1alpha1 types.
func NewStatusUpdater(status *StatusREST, scheme *runtime.Scheme) *StatusUpdater {
	return &StatusUpdater{status: status, scheme: scheme}
}

// UpdateStatus calls mutate on a v1alpha1 copy of the stored request key and, when mutate reports a
// change, writes the status it left. mutate may be called more than once (once for each try), each time
// with a fresh copy. A request that does not exist is no error: there is nothing to report on.
func (u *StatusUpdater) UpdateStatus(ctx context.Context, key types.NamespacedName, mutate func(*v1alpha1.ServingCertRequest) bool) error {
	ctx = genericapirequest.WithNamespace(ctx, key.Namespace)
	info := &statusMutation{scheme: u.scheme, mutate: mutate}
	_, _, err := u.status.Update(ctx, key.Name, info, rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the status of ServingCertRequest %s: %w", key, err)
	}
	return nil
}

// statusMutation is the rest.UpdatedObjectInfo of one UpdateStatus.
type statusMutation struct {
	scheme *runtime.Scheme
	mutate func(*v1alpha1.ServingCertRequest) bool
}

func (*statusMutation) Preconditions() *metav1.Preconditions { return nil }

// UpdatedObject returns the stored object with mutate's change, or an unchanged copy of it, which the
// storage then does not write. It never changes oldObj, which may be the watch cache's.
func (m *statusMutation) UpdatedObject(_ context.Context, oldObj runtime.Object) (runtime.Object, error) {
	old, ok := oldObj.(*certapi.ServingCertRequest)
	if !ok {
		return nil, fmt.Errorf("the stored object is a %T, not a ServingCertRequest", oldObj)
	}
	versioned := &v1alpha1.ServingCertRequest{}
	if err := m.scheme.Convert(old.DeepCopy(), versioned, nil); err != nil {
		return nil, fmt.Errorf("converting the stored ServingCertRequest: %w", err)
	}
	if !m.mutate(versioned) {
		return old.DeepCopy(), nil
	}
	out := &certapi.ServingCertRequest{}
	if err := m.scheme.Convert(versioned, out, nil); err != nil {
		return nil, fmt.Errorf("converting the new status: %w", err)
	}
	return out, nil
}
