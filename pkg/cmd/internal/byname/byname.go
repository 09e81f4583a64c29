// Package byname lists and watches the one object a kubectl plugin command waits for, by its name.
package byname

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Client lists and watches objects of one kind, in one namespace or cluster-wide: a typed client of
// client-go or of certapi's clientset. L is the kind's list type.
type Client[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ListWatch lists and watches, through client, only the object named name (a field selector on
// metadata.name).
func ListWatch[L runtime.Object](client Client[L], name string) *cache.ListWatch {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			return client.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			return client.Watch(ctx, opts)
		},
	}
}
