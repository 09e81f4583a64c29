package secretdelivery

import (
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/status"
)

// enqueueAll enqueues every request with a spec.secretName and returns how many.
func (c *Controller) enqueueAll() int {
	n := 0
	for _, obj := range c.requestInformer.GetStore().List() {
		if req, ok := obj.(*certapiv1alpha1.ServingCertRequest); ok && req.Spec.SecretName != "" {
			c.queue.Add(keyOf(req))
			n++
		}
	}
	return n
}

// onRequestAdd enqueues a new (or, at start, every) request with a Secret to deliver into, and one whose
// Ready condition still reports a Secret conflict.
func (c *Controller) onRequestAdd(obj any) {
	req, ok := obj.(*certapiv1alpha1.ServingCertRequest)
	if !ok {
		return
	}
	if req.Spec.SecretName != "" || notDelivering(readyReason(req)) {
		c.queue.Add(keyOf(req))
	}
}

// notDelivering reports whether a Ready reason says that certapi does not deliver into the request's
// Secret: a reason that must be cleared once spec.secretName is unset.
func notDelivering(reason string) bool {
	switch reason {
	case status.ReasonSecretConflict, status.ReasonNamespaceNotOptedIn, status.ReasonSecretAccessForbidden:
		return true
	}
	return false
}

// onNamespace hands a change of an opted-in namespace (gained or lost the label, deleted) to the
// namespace queue, which starts or stops its Secret informer.
func (c *Controller) onNamespace(obj any) {
	if name, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.nsQueue.Add(name)
	}
}

// enqueueNamespace enqueues every request of namespace with a spec.secretName, or still reporting that
// it is not delivered: its namespace's Secret access changed (the cache synced, was refused, stopped).
func (c *Controller) enqueueNamespace(namespace string) {
	objs, err := c.requestInformer.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
	if err != nil {
		return
	}
	for _, o := range objs {
		if req, ok := o.(*certapiv1alpha1.ServingCertRequest); ok && (req.Spec.SecretName != "" || notDelivering(readyReason(req))) {
			c.queue.Add(keyOf(req))
		}
	}
	c.changes.Notify()
}

// onRequestUpdate enqueues a request when its spec or its renewal request (AnnotationRenewRequestedAt)
// changed, or on a resync. Status-only updates, most of them this controller's own, are ignored.
func (c *Controller) onRequestUpdate(oldObj, newObj any) {
	oldReq, ok1 := oldObj.(*certapiv1alpha1.ServingCertRequest)
	newReq, ok2 := newObj.(*certapiv1alpha1.ServingCertRequest)
	if !ok1 || !ok2 {
		return
	}
	renewAsked := oldReq.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt] != newReq.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt]
	if oldReq.Generation == newReq.Generation && oldReq.ResourceVersion != newReq.ResourceVersion && !renewAsked {
		return
	}
	if newReq.Spec.SecretName != "" || oldReq.Spec.SecretName != "" {
		c.queue.Add(keyOf(newReq))
	}
}

// onRequestDelete forgets what was reported for a deleted request. Its Secret stays as it is.
func (c *Controller) onRequestDelete(obj any) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		return
	}
	c.forgetConflict(types.NamespacedName{Namespace: key.Namespace, Name: key.Name})
	c.changes.Notify()
}

// onSecret enqueues the request a certapi Secret's annotation names and every request whose
// spec.secretName names it, so that a deleted Secret is re-created within moments and a Secret that
// another request gave up is taken over. A labelled Secret that no existing request names or is named by
// makes no work.
func (c *Controller) onSecret(obj any) {
	var s *secretView
	switch o := obj.(type) {
	case *secretView:
		s = o
	case cache.DeletedFinalStateUnknown:
		if ds, ok := o.Obj.(*secretView); ok {
			s = ds
		} else if ns, name, err := cache.SplitMetaNamespaceKey(o.Key); err == nil {
			c.enqueueForSecret(ns, name)
		}
	}
	c.changes.Notify()
	if s == nil {
		return
	}
	if owner := s.Annotations[certapiv1alpha1.AnnotationServingCertRequest]; owner != "" {
		if _, err := c.requests.ServingCertRequests(s.Namespace).Get(owner); err == nil {
			c.queue.Add(types.NamespacedName{Namespace: s.Namespace, Name: owner})
		}
	}
	c.enqueueForSecret(s.Namespace, s.Name)
}

// enqueueForSecret enqueues every request whose spec.secretName is namespace/name.
func (c *Controller) enqueueForSecret(namespace, name string) {
	objs, err := c.requestInformer.GetIndexer().ByIndex(secretNameIndex, namespace+"/"+name)
	if err != nil {
		return
	}
	for _, o := range objs {
		if req, ok := o.(*certapiv1alpha1.ServingCertRequest); ok {
			c.queue.Add(keyOf(req))
		}
	}
}

func keyOf(req *certapiv1alpha1.ServingCertRequest) types.NamespacedName {
	return types.NamespacedName{Namespace: req.Namespace, Name: req.Name}
}
