package certificateauthority

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/registry/inprocess"
	"github.com/certapi/certapi/pkg/registry/withstatus"
)

// StatusUpdater writes CertificateAuthority/default's status in this process (pkg/registry/inprocess),
// its strategy keeping spec and metadata as stored and validating the status. A writer that holds an
// older copy (the leader's CA status, guarded by the
// resourceVersion it read) gets a conflict and reads again instead of undoing the change.
type StatusUpdater struct {
	status *withstatus.StatusREST
	scheme *runtime.Scheme
}

// NewStatusUpdater returns a StatusUpdater over the status storage that NewREST made. scheme converts
// between the internal and v1alpha1 types. Its writes skip the read of the leader election that the
// status storage's answers carry: nobody reads them.
func NewStatusUpdater(status *StatusREST, scheme *runtime.Scheme) *StatusUpdater {
	return &StatusUpdater{status: status.StatusREST, scheme: scheme}
}

// UpdateStatus calls mutate on a v1alpha1 copy of CertificateAuthority/default as stored and, when
// mutate reports a change, writes the status it left. mutate may be called more than once. A
// CertificateAuthority that does not exist yet is an error: the caller tries again later.
func (u *StatusUpdater) UpdateStatus(ctx context.Context, mutate func(*v1alpha1.CertificateAuthority) bool) error {
	// The storage keys objects by the request's namespace: none, for this cluster-scoped resource.
	ctx = genericapirequest.WithNamespace(ctx, metav1.NamespaceNone)
	err := inprocess.UpdateStatus[certapi.CertificateAuthority, v1alpha1.CertificateAuthority](ctx, u.status, u.scheme, "CertificateAuthority", v1alpha1.CertificateAuthorityName, mutate)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("CertificateAuthority/%s does not exist yet: %w", v1alpha1.CertificateAuthorityName, err)
	}
	if err != nil {
		return fmt.Errorf("writing the status of CertificateAuthority/%s: %w", v1alpha1.CertificateAuthorityName, err)
	}
	return nil
}
