package injector

import (
	"crypto/sha256"
	"encoding/base64"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// annotationsHashKey holds, in the informer cache only, a fingerprint of all of an object's
// annotations (see annotationsHash). It is never written to any object.
const annotationsHashKey = "injector.certapi.dev/annotations-hash"

// trimMetadata is the informers' transform: it keeps the name, UID, resourceVersion, deletion
// timestamp and the annotations that matter, plus a fingerprint of all annotations.
func trimMetadata(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{
		TypeMeta: m.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              m.Name,
			Namespace:         m.Namespace,
			UID:               m.UID,
			ResourceVersion:   m.ResourceVersion,
			DeletionTimestamp: m.DeletionTimestamp,
		},
	}
	for k, v := range m.Annotations {
		if relevantAnnotation(k) {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	if out.Annotations[certapiv1alpha1.AnnotationInjectCABundle] == "true" {
		out.Annotations[annotationsHashKey] = annotationsHash(m.Annotations)
	}
	return out, nil
}

// optedIn reports whether m opts in and is not being deleted.
func optedIn(m *metav1.PartialObjectMetadata) bool {
	return m.Annotations[certapiv1alpha1.AnnotationInjectCABundle] == "true" && m.DeletionTimestamp == nil
}

// relevantAnnotation reports whether the informer cache keeps annotation k.
func relevantAnnotation(k string) bool {
	return k == certapiv1alpha1.AnnotationInjectCABundle || k == certapiv1alpha1.AnnotationKeepForeignCA || isForeignInjectorAnnotation(k)
}

// annotationsHash fingerprints all of an object's annotations, so that a change to any of them can
// end a conflict's cool-down without the cache keeping them all (last-applied-configuration on a CRD
// is as large as the CRD).
func annotationsHash(annotations map[string]string) string {
	keys := make([]string, 0, len(annotations))
	for k := range annotations {
		if k == annotationsHashKey {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write([]byte(annotations[k]))
		h.Write([]byte{0})
	}
	return base64.RawStdEncoding.EncodeToString(h.Sum(nil)[:12])
}

// onObject enqueues an object that opts in, or that did (so that giving up is noticed).
func (i *Injector) onObject(kind Kind, obj any) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	k := key{kind, storeKey(m)}
	i.mu.Lock()
	_, tracked := i.objects[k]
	if optedIn(m) && !tracked {
		i.objects[k] = &objState{state: StatePending}
		tracked = true
	}
	i.mu.Unlock()
	if tracked {
		i.queue.Add(k)
	}
}

// storeKey is m's key in its informer's store, and so in the injector: "<namespace>/<name>" for a
// namespaced object, the name for a cluster-scoped one.
func storeKey(m *metav1.PartialObjectMetadata) string {
	if m.Namespace != "" {
		return m.Namespace + "/" + m.Name
	}
	return m.Name
}

// onDelete forgets a deleted object; its caBundle stays as it is.
func (i *Injector) onDelete(kind Kind, obj any) {
	name, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	i.forget(key{kind, name})
}

// meta returns the informer's copy of k, or nil.
func (i *Injector) meta(k key) *metav1.PartialObjectMetadata {
	obj, exists, err := i.informers[k.kind].GetStore().GetByKey(k.name)
	if err != nil || !exists {
		return nil
	}
	m, _ := obj.(*metav1.PartialObjectMetadata)
	return m
}
