package certificateauthority

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// StatusUpdater writes CertificateAuthority/default's status in this process, through the status
// subresource's storage and its strategy (spec and metadata kept as stored, the status validated): no
// request through the loopback, so nothing that kube-apiserver or certapi's request metrics count. It
// applies a change to the stored object as the storage reads it, so it never meets a stale
// resourceVersion, and a writer that holds an older copy (the leader's CA status, guarded by the
// resourceVersion it read) gets a conflict and reads again instead of undoing the change.
type StatusUpdater struct {
	status *StatusREST
	scheme *runtime.Scheme
}

// NewStatusUpdater returns a StatusUpdater over the status storage that NewREST made. scheme converts
// between the internal and v1alpha1 types.
func NewStatusUpdater(status *StatusREST, scheme *runtime.Scheme) *StatusUpdater {
	return &StatusUpdater{status: status, scheme: scheme}
}

// UpdateStatus calls mutate on a v1alpha1 copy of CertificateAuthority/default as stored and, when
// mutate reports a change, writes the status it left. mutate may be called more than once. A
// CertificateAuthority that does not exist yet is an error: the caller tries again later.
func (u *StatusUpdater) UpdateStatus(ctx context.Context, mutate func(*v1alpha1.CertificateAuthority) bool) error {
	// The storage keys objects by the request's namespace: none, for this cluster-scoped resource.
	ctx = genericapirequest.WithNamespace(ctx, metav1.NamespaceNone)
	info := &statusMutation{scheme: u.scheme, mutate: mutate}
	_, _, err := u.status.Update(ctx, v1alpha1.CertificateAuthorityName, info, rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("CertificateAuthority/%s does not exist yet: %w", v1alpha1.CertificateAuthorityName, err)
	}
	if err != nil {
		return fmt.Errorf("writing the status of CertificateAuthority/%s: %w", v1alpha1.CertificateAuthorityName, err)
	}
	return nil
}

// statusMutation is the rest.UpdatedObjectInfo of one UpdateStatus.
type statusMutation struct {
	scheme *runtime.Scheme
	mutate func(*v1alpha1.CertificateAuthority) bool
}

func (*statusMutation) Preconditions() *metav1.Preconditions { return nil }

// UpdatedObject returns the stored object with mutate's change, or an unchanged copy of it, which the
// storage then does not write. It never changes oldObj, which may be the watch cache's.
func (m *statusMutation) UpdatedObject(_ context.Context, oldObj runtime.Object) (runtime.Object, error) {
	old, ok := oldObj.(*certapi.CertificateAuthority)
	if !ok {
		return nil, fmt.Errorf("the stored object is a %T, not a CertificateAuthority", oldObj)
	}
	versioned := &v1alpha1.CertificateAuthority{}
	if err := m.scheme.Convert(old.DeepCopy(), versioned, nil); err != nil {
		return nil, fmt.Errorf("converting the stored CertificateAuthority: %w", err)
	}
	if !m.mutate(versioned) {
		return old.DeepCopy(), nil
	}
	out := &certapi.CertificateAuthority{}
	if err := m.scheme.Convert(versioned, out, nil); err != nil {
		return nil, fmt.Errorf("converting the new status: %w", err)
	}
	return out, nil
}
