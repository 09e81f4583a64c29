package secretdelivery

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/klog/v2"
)

// maxConflictWatches bounds the watches open on foreign Secrets at once. A request in conflict with a
// Secret beyond it is looked at again with the conflict backoff instead, so a namespace full of
// conflicting requests costs kube-apiserver a bounded number of watches.
const maxConflictWatches = 256

// conflictWatches wakes the requests in conflict with a Secret that is not certapi's. Such a Secret is
// not in the controller's cache (it holds only labelled Secrets), so nothing would tell the controller
// that its owner deleted it or handed it over; rather than read it again on a timer, one watch per
// Secret, on that name alone, enqueues every request that names it on any change. A watch ends when no
// request is in conflict with its Secret any more, or with the leadership term's context.
type conflictWatches struct {
	kube kubernetes.Interface
	// wake enqueues every request whose spec.secretName is namespace/name.
	wake func(namespace, name string)

	mu sync.Mutex
	// bySecret is the watch of each Secret ("namespace/name"); byRequest the Secret each request in
	// conflict is waiting on.
	bySecret  map[string]*secretWatch
	byRequest map[types.NamespacedName]string
}

type secretWatch struct {
	cancel   context.CancelFunc
	requests int
}

func newConflictWatches(kube kubernetes.Interface, wake func(namespace, name string)) *conflictWatches {
	return &conflictWatches{kube: kube, wake: wake, bySecret: map[string]*secretWatch{}, byRequest: map[types.NamespacedName]string{}}
}

// watch makes sure the request key is woken by a change to the Secret s it is in conflict with, read at
// s.ResourceVersion. It returns false when it cannot (too many watches, or no resourceVersion to start
// from): then the caller must look again on a timer. The watch belongs to ctx.
func (w *conflictWatches) watch(ctx context.Context, key types.NamespacedName, s *secretView) bool {
	if s == nil || s.ResourceVersion == "" {
		return false
	}
	secretKey := s.Namespace + "/" + s.Name
	w.mu.Lock()
	defer w.mu.Unlock()
	if prev, ok := w.byRequest[key]; ok {
		if prev == secretKey {
			return true
		}
		w.releaseLocked(key)
	}
	if sw, ok := w.bySecret[secretKey]; ok {
		sw.requests++
		w.byRequest[key] = secretKey
		return true
	}
	if len(w.bySecret) >= maxConflictWatches {
		return false
	}
	wctx, cancel := context.WithCancel(ctx)
	sw := &secretWatch{cancel: cancel, requests: 1}
	w.bySecret[secretKey] = sw
	w.byRequest[key] = secretKey
	go w.run(wctx, sw, s.Namespace, s.Name, s.ResourceVersion)
	return true
}

// release stops waiting on the Secret of key, and closes its watch when no request is left on it.
func (w *conflictWatches) release(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.releaseLocked(key)
}

func (w *conflictWatches) releaseLocked(key types.NamespacedName) {
	secretKey, ok := w.byRequest[key]
	if !ok {
		return
	}
	delete(w.byRequest, key)
	if sw := w.bySecret[secretKey]; sw != nil {
		if sw.requests--; sw.requests <= 0 {
			sw.cancel()
			delete(w.bySecret, secretKey)
		}
	}
}

// active is how many Secrets are watched now.
func (w *conflictWatches) active() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.bySecret)
}

// run watches one Secret from rv until ctx ends, waking its requests on every event. A watch that ends
// on its own (the resourceVersion is too old, the Secret's namespace is gone) is forgotten and its
// requests woken: their sync reads the Secret again and starts a new watch if still in conflict.
func (w *conflictWatches) run(ctx context.Context, sw *secretWatch, namespace, name, rv string) {
	secrets := w.kube.CoreV1().Secrets(namespace)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return secrets.Watch(ctx, o)
		},
	})
	if err != nil {
		w.ended(ctx, sw, namespace, name, err)
		return
	}
	defer rw.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-rw.ResultChan():
			if !ok || ev.Type == watch.Error {
				w.ended(ctx, sw, namespace, name, nil)
				return
			}
			w.wake(namespace, name)
		}
	}
}

// ended forgets the watch of namespace/name that stopped on its own and wakes its requests.
func (w *conflictWatches) ended(ctx context.Context, sw *secretWatch, namespace, name string, err error) {
	if ctx.Err() != nil {
		return // released, or the term ended
	}
	secretKey := namespace + "/" + name
	w.mu.Lock()
	if w.bySecret[secretKey] == sw {
		sw.cancel()
		delete(w.bySecret, secretKey)
		for req, s := range w.byRequest {
			if s == secretKey {
				delete(w.byRequest, req)
			}
		}
	}
	w.mu.Unlock()
	klog.FromContext(ctx).V(2).Info("Watch of a Secret in conflict ended; reading it again", "secret", secretKey, "err", err)
	w.wake(namespace, name)
}
