// Package listwatch lists and watches certapi's own resources straight from this server's storage, for
// the informers certapi runs itself (the leader's controllers, each replica's own serving certificate).
//
// Through the loopback client every object of such an informer was encoded to JSON by this server,
// sent over TLS to itself and decoded again: for each ServingCertRequest created or written, the
// costliest part of what certapi does for it after signing. In-process, an informer receives the watch
// cache's own events and only converts them to the versioned type. Each object is deep-copied before it
// is converted, so the informer never shares a slice or map with the watch cache, which serves every
// client; strings, which cannot change, are shared, so an object the watch cache holds costs the
// informer little more than its structs.
package listwatch

import (
	"context"
	"fmt"
	"sync"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/client-go/tools/cache"
)

// Storage is what a ListerWatcher reads: a resource's REST storage (a generic registry Store), which
// serves lists and watches from its watch cache.
type Storage interface {
	rest.Lister
	rest.Watcher
}

// ListerWatcher lists and watches one resource of this server's storage in all namespaces and returns
// its objects in a versioned type.
type ListerWatcher struct {
	storage Storage
	scheme  *runtime.Scheme
	// newObject and newList make an empty object and list of the versioned type.
	newObject func() runtime.Object
	newList   func() runtime.Object
}

var _ cache.ListerWatcherWithContext = &ListerWatcher{}

// New returns a ListerWatcher of storage whose objects scheme converts into the types newObject and
// newList make (e.g. v1alpha1.ServingCertRequest and v1alpha1.ServingCertRequestList).
func New(storage Storage, scheme *runtime.Scheme, newObject, newList func() runtime.Object) *ListerWatcher {
	return &ListerWatcher{storage: storage, scheme: scheme, newObject: newObject, newList: newList}
}

// ListWithContext lists every object, as the versioned list type.
func (l *ListerWatcher) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	opts, err := internalOptions(options)
	if err != nil {
		return nil, err
	}
	list, err := l.storage.List(allNamespaces(ctx), opts)
	if err != nil {
		return nil, err
	}
	out := l.newList()
	if err := l.scheme.Convert(list.DeepCopyObject(), out, nil); err != nil {
		return nil, fmt.Errorf("converting a list of %T: %w", list, err)
	}
	return out, nil
}

// WatchWithContext watches every object; the events carry objects of the versioned type. The watch
// ends when ctx does or when the caller stops it.
func (l *ListerWatcher) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	opts, err := internalOptions(options)
	if err != nil {
		return nil, err
	}
	w, err := l.storage.Watch(allNamespaces(ctx), opts)
	if err != nil {
		return nil, err
	}
	return newConvertingWatch(ctx, w, l.convert), nil
}

// List is ListWithContext without a context, for callers of the older interface.
func (l *ListerWatcher) List(options metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), options)
}

// Watch is WatchWithContext without a context, for callers of the older interface.
func (l *ListerWatcher) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), options)
}

// convert returns a versioned deep copy of one watch event's object. A Status (an error event) passes
// as it is.
func (l *ListerWatcher) convert(obj runtime.Object) (runtime.Object, error) {
	if _, ok := obj.(*metav1.Status); ok {
		return obj, nil
	}
	var copied runtime.Object
	if c, ok := obj.(runtime.CacheableObject); ok {
		// The watch cache wraps each object with the encodings it made of it; GetObject deep-copies it.
		copied = c.GetObject()
	} else {
		copied = obj.DeepCopyObject()
	}
	out := l.newObject()
	if err := l.scheme.Convert(copied, out, nil); err != nil {
		return nil, fmt.Errorf("converting %T: %w", obj, err)
	}
	return out, nil
}

// internalOptions converts a client's list options into the storage's.
func internalOptions(options metav1.ListOptions) (*metainternalversion.ListOptions, error) {
	out := &metainternalversion.ListOptions{}
	if err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&options, out, nil); err != nil {
		return nil, fmt.Errorf("converting list options: %w", err)
	}
	return out, nil
}

// allNamespaces is a request context with no namespace: the storage then lists and watches every one.
func allNamespaces(ctx context.Context) context.Context {
	return genericapirequest.WithNamespace(ctx, metav1.NamespaceAll)
}

// convertingWatch passes on a storage watch's events with their objects converted. A conversion that
// fails becomes an error event, after which the caller (a reflector) starts a new watch.
type convertingWatch struct {
	source  watch.Interface
	convert func(runtime.Object) (runtime.Object, error)
	result  chan watch.Event
	stop    chan struct{}
	once    sync.Once
}

func newConvertingWatch(ctx context.Context, source watch.Interface, convert func(runtime.Object) (runtime.Object, error)) *convertingWatch {
	w := &convertingWatch{
		source:  source,
		convert: convert,
		result:  make(chan watch.Event),
		stop:    make(chan struct{}),
	}
	go w.run(ctx)
	return w
}

func (w *convertingWatch) run(ctx context.Context) {
	defer close(w.result)
	defer w.source.Stop()
	in := w.source.ResultChan()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return
		case <-w.stop:
			return
		case ev, ok = <-in:
			if !ok {
				return
			}
		}
		if ev.Object != nil {
			obj, err := w.convert(ev.Object)
			if err != nil {
				ev = watch.Event{Type: watch.Error, Object: &metav1.Status{
					Status: metav1.StatusFailure, Reason: metav1.StatusReasonInternalError, Message: err.Error(),
				}}
			} else {
				ev.Object = obj
			}
		}
		select {
		case w.result <- ev:
		case <-ctx.Done():
			return
		case <-w.stop:
			return
		}
		if ev.Type == watch.Error {
			return
		}
	}
}

// ResultChan returns the converted events; it is closed when the watch ends.
func (w *convertingWatch) ResultChan() <-chan watch.Event { return w.result }

// Stop ends the watch and the storage's watch under it. It may be called more than once.
func (w *convertingWatch) Stop() { w.once.Do(func() { close(w.stop) }) }
