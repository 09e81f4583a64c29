package secretdelivery

import (
	"context"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/deliveryscope"
)

// secretCaches is where the controller's cache of certapi's Secrets is: one cluster-wide informer (the
// cluster scope), or one informer per namespace that opted in to Secret delivery (the
// labelled-namespaces scope), so that certapi's ServiceAccount needs no Secret rights anywhere else.
type secretCaches interface {
	// get returns the cache's view of namespace/name, nil when it holds none.
	get(namespace, name string) *secretView
	// access says whether Secrets of namespace can be delivered now (see decideAccess).
	access(namespace string) namespaceAccess
	// list returns every cached Secret; ok is false while a cache that may yet sync has not.
	list() (views []*secretView, ok bool)
}

// clusterSecrets is the cluster scope's cache: one informer of certapi's Secrets in every namespace,
// declared on the term, which waits for it before the controller runs.
type clusterSecrets struct {
	informer cache.SharedIndexInformer
}

func (s clusterSecrets) get(namespace, name string) *secretView {
	return viewByKey(s.informer, namespace, name)
}

func (s clusterSecrets) access(string) namespaceAccess {
	return namespaceAccess{OptedIn: true, Synced: true}
}

func (s clusterSecrets) list() ([]*secretView, bool) {
	return views(s.informer), s.informer.HasSynced()
}

// namespaceSecrets is the labelled-namespaces scope's cache: an informer of the namespaces labelled
// certapi.dev/secret-delivery=enabled (declared on the term), and one informer of certapi's Secrets per
// such namespace, started when a namespace gains the label and stopped when it loses it (or is deleted),
// by the controller's namespace queue (syncNamespace). The term waits for the namespace informer; each
// Secret informer says when it has synced (or that kube-apiserver refuses it: the RoleBinding is
// missing) by calling changed, which enqueues that namespace's requests.
type namespaceSecrets struct {
	kube kubernetes.Interface
	// namespaces holds the opted-in namespaces (a label-selected informer); its objects are trimmed to
	// name and labels.
	namespaces cache.SharedIndexInformer
	// handler receives every Secret informer's events (the controller's onSecret).
	handler cache.ResourceEventHandler
	// changed is told that the access of a namespace changed: its informer synced, was refused, or
	// stopped.
	changed func(namespace string)

	mu     sync.Mutex
	byName map[string]*namespaceSecretCache
	wg     sync.WaitGroup
}

// namespaceSecretCache is one namespace's Secret informer.
type namespaceSecretCache struct {
	informer cache.SharedIndexInformer
	factory  informers.SharedInformerFactory
	cancel   context.CancelFunc
	synced   atomic.Bool
	// forbidden is kube-apiserver's refusal of the informer's list or watch, "" when none.
	forbidden atomic.Pointer[string]
}

// newNamespaceSecrets makes the namespace informer (not started: the term starts it).
func newNamespaceSecrets(kube kubernetes.Interface) (*namespaceSecrets, informers.SharedInformerFactory) {
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.LabelSelector = certapiv1alpha1.LabelSecretDelivery + "=" + certapiv1alpha1.SecretDeliveryEnabled
		}),
		informers.WithTransform(trimNamespace))
	return &namespaceSecrets{
		kube:       kube,
		namespaces: factory.Core().V1().Namespaces().Informer(),
		byName:     map[string]*namespaceSecretCache{},
	}, factory
}

// trimNamespace keeps a namespace's name, resourceVersion, deletion timestamp and labels: all the
// controller reads.
func trimNamespace(obj any) (any, error) {
	if ns, ok := obj.(*corev1.Namespace); ok {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns.Name, UID: ns.UID, ResourceVersion: ns.ResourceVersion,
			DeletionTimestamp: ns.DeletionTimestamp, Labels: ns.Labels}}, nil
	}
	return obj, nil
}

// optedIn reports whether the namespace informer holds namespace with the opt-in label.
func (s *namespaceSecrets) optedIn(namespace string) bool {
	obj, ok, err := s.namespaces.GetStore().GetByKey(namespace)
	if err != nil || !ok {
		return false
	}
	ns, ok := obj.(*corev1.Namespace)
	return ok && ns.DeletionTimestamp == nil && deliveryscope.OptedIn(ns.Labels)
}

func (s *namespaceSecrets) cacheOf(namespace string) *namespaceSecretCache {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byName[namespace]
}

func (s *namespaceSecrets) get(namespace, name string) *secretView {
	if nc := s.cacheOf(namespace); nc != nil {
		return viewByKey(nc.informer, namespace, name)
	}
	return nil
}

func (s *namespaceSecrets) access(namespace string) namespaceAccess {
	a := namespaceAccess{OptedIn: s.optedIn(namespace)}
	if !a.OptedIn {
		return a
	}
	if nc := s.cacheOf(namespace); nc != nil {
		a.Running = true
		a.Synced = nc.synced.Load()
		if f := nc.forbidden.Load(); f != nil {
			a.Forbidden = *f
		}
	}
	return a
}

// list returns the Secrets of every namespace's cache. ok is false while one that kube-apiserver does
// not refuse has not synced: a refused one holds nothing certapi can re-issue, and is not waited for.
func (s *namespaceSecrets) list() ([]*secretView, bool) {
	if !s.namespaces.HasSynced() {
		return nil, false
	}
	s.mu.Lock()
	caches := make([]*namespaceSecretCache, 0, len(s.byName))
	for _, nc := range s.byName {
		caches = append(caches, nc)
	}
	s.mu.Unlock()
	ok := true
	var out []*secretView
	for _, nc := range caches {
		if !nc.synced.Load() {
			if f := nc.forbidden.Load(); f == nil || *f == "" {
				ok = false
			}
			continue
		}
		out = append(out, views(nc.informer)...)
	}
	return out, ok
}

// sync starts or stops the Secret informer of namespace, as decideNamespace says. The informers belong
// to ctx (the term's), and stop with it at the latest.
func (s *namespaceSecrets) sync(ctx context.Context, namespace string) {
	nc := s.cacheOf(namespace)
	switch decideNamespace(s.optedIn(namespace), nc != nil) {
	case namespaceStart:
		s.start(ctx, namespace)
	case namespaceStop:
		s.stop(namespace, nc)
		klog.FromContext(ctx).V(2).Info("Namespace no longer opted in to Secret delivery; stopped watching its Secrets", "namespace", namespace)
		s.changed(namespace)
	}
}

// start runs an informer of certapi's Secrets (label certapi.dev/managed=true) in namespace alone.
func (s *namespaceSecrets) start(ctx context.Context, namespace string) {
	logger := klog.FromContext(ctx).WithValues("namespace", namespace)
	factory := informers.NewSharedInformerFactoryWithOptions(s.kube, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = certapiv1alpha1.LabelManaged + "=true" }),
		informers.WithTransform(viewSecret))
	informer := factory.Core().V1().Secrets().Informer()
	nc := &namespaceSecretCache{informer: informer, factory: factory}
	// A list or watch that kube-apiserver refuses (the namespace is labelled, the RoleBinding is
	// missing) is reported once on the namespace's requests, not logged at every retry of the
	// reflector, whose backoff (up to 30 s) bounds the retries. Other errors are handled as by default.
	if err := informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if !apierrors.IsForbidden(err) {
			cache.DefaultWatchErrorHandler(ctx, r, err)
			return
		}
		msg := err.Error()
		if prev := nc.forbidden.Swap(&msg); prev == nil || *prev != msg {
			logger.V(2).Info("kube-apiserver refuses certapi access to the Secrets of a namespace opted in to Secret delivery", "err", err)
			s.changed(namespace)
		}
	}); err != nil {
		logger.Error(err, "Cannot handle the Secret informer's errors")
	}
	reg, err := informer.AddEventHandler(s.handler)
	if err != nil {
		logger.Error(err, "Cannot watch the namespace's Secrets")
		return
	}
	ictx, cancel := context.WithCancel(ctx)
	nc.cancel = cancel
	s.mu.Lock()
	s.byName[namespace] = nc
	s.mu.Unlock()
	factory.Start(ictx.Done())
	logger.V(2).Info("Namespace opted in to Secret delivery; watching its Secrets")
	s.wg.Go(func() {
		if cache.WaitFor(ictx, "", reg.HasSyncedChecker()) {
			nc.synced.Store(true)
			nc.forbidden.Store(nil)
			s.changed(namespace)
		}
	})
}

// stop ends nc, the informer of namespace, and forgets it.
func (s *namespaceSecrets) stop(namespace string, nc *namespaceSecretCache) {
	s.mu.Lock()
	if s.byName[namespace] == nc {
		delete(s.byName, namespace)
	}
	s.mu.Unlock()
	nc.cancel()
	nc.factory.Shutdown()
}

// stopAll ends every namespace's informer, at the end of the term, and waits for their goroutines.
func (s *namespaceSecrets) stopAll() {
	s.mu.Lock()
	all := s.byName
	s.byName = map[string]*namespaceSecretCache{}
	s.mu.Unlock()
	for _, nc := range all {
		nc.cancel()
		nc.factory.Shutdown()
	}
	s.wg.Wait()
}

// viewByKey returns informer's view of namespace/name, nil when it holds none.
func viewByKey(informer cache.SharedIndexInformer, namespace, name string) *secretView {
	obj, ok, err := informer.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	v, _ := obj.(*secretView)
	return v
}

// views lists informer's secretViews.
func views(informer cache.SharedIndexInformer) []*secretView {
	objs := informer.GetStore().List()
	out := make([]*secretView, 0, len(objs))
	for _, obj := range objs {
		if v, ok := obj.(*secretView); ok {
			out = append(out, v)
		}
	}
	return out
}
