package servingcertrequest

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/registry/inprocess"
)

// StatusUpdater writes the status of ServingCertRequests in this process (pkg/registry/inprocess), for
// the leader, through the status subresource's strategy (which keeps spec and metadata as stored, and
// validates).
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
	err := inprocess.UpdateStatus[certapi.ServingCertRequest, v1alpha1.ServingCertRequest](ctx, u.status, u.scheme, "ServingCertRequest", key.Name, mutate)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing the status of ServingCertRequest %s: %w", key, err)
	}
	return nil
}
