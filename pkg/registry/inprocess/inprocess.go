// Package inprocess writes an object's status in certapi's own process, through its status
// subresource's storage and strategy, for the leader: no request to itself through its loopback, no JSON
// each way, nothing that kube-apiserver's or certapi's request metrics count. The change is applied to
// the stored object as the storage reads it, so a write never meets a stale resourceVersion: the storage
// retries one that lost a race with the object it then reads. The ServingCertRequest and
// CertificateAuthority registries both write their status this one way.
package inprocess

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
)

// Object is a pointer to an API type: the internal type I or its versioned form V.
type Object[T any] interface {
	*T
	runtime.Object
}

// StatusStorage is the status subresource's storage: its Update applies an UpdatedObjectInfo.
type StatusStorage interface {
	Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
		updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error)
}

// UpdateStatus calls mutate on a versioned copy (V) of the stored object name (internal type I, kind for
// errors) and, when mutate reports a change, writes the status it left through storage. mutate may be
// called more than once, each time with a fresh copy. ctx carries the object's namespace (none for a
// cluster-scoped kind). The storage's error is returned as it is (a NotFound stays one).
func UpdateStatus[I, V any, PI Object[I], PV Object[V]](ctx context.Context, storage StatusStorage, scheme *runtime.Scheme, kind, name string, mutate func(PV) bool) error {
	info := &mutation[I, V, PI, PV]{scheme: scheme, kind: kind, mutate: mutate}
	_, _, err := storage.Update(ctx, name, info, rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	return err
}

// mutation is the rest.UpdatedObjectInfo of one UpdateStatus.
type mutation[I, V any, PI Object[I], PV Object[V]] struct {
	scheme *runtime.Scheme
	kind   string
	mutate func(PV) bool
}

func (*mutation[I, V, PI, PV]) Preconditions() *metav1.Preconditions { return nil }

// UpdatedObject returns the stored object with mutate's change, or an unchanged copy of it, which the
// storage then does not write. It never changes oldObj, which may be the watch cache's.
func (m *mutation[I, V, PI, PV]) UpdatedObject(_ context.Context, oldObj runtime.Object) (runtime.Object, error) {
	old, ok := oldObj.(PI)
	if !ok {
		return nil, fmt.Errorf("the stored object is a %T, not a %s", oldObj, m.kind)
	}
	versioned := PV(new(V))
	if err := m.scheme.Convert(old.DeepCopyObject(), versioned, nil); err != nil {
		return nil, fmt.Errorf("converting the stored %s: %w", m.kind, err)
	}
	if !m.mutate(versioned) {
		return old.DeepCopyObject(), nil
	}
	out := PI(new(I))
	if err := m.scheme.Convert(versioned, out, nil); err != nil {
		return nil, fmt.Errorf("converting the new status of the %s: %w", m.kind, err)
	}
	return out, nil
}
