// Package status writes ServingCertRequest status for the leader, coalesced off the request path: many
// issuances against one request in a short time make one status write, not one each.
package status

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	certapilisters "github.com/certapi/certapi/pkg/generated/listers/certapi/v1alpha1"
)

// Condition reasons certapi writes on a request's Ready condition.
const (
	ReasonIssued         = "Issued"
	ReasonRenewing       = "Renewing"
	ReasonSecretConflict = "SecretConflict"
	ReasonDenied         = "Denied"
	ReasonPending        = "Pending"
)

// Issued describes one certificate issued for a request, by either path.
type Issued struct {
	Certificate  string
	CABundle     string
	SerialNumber string
	NotBefore    time.Time
	NotAfter     time.Time
	RenewalTime  time.Time
	IssuedAt     time.Time
}

// Ready is a Ready condition to set, with the generation it describes.
type Ready struct {
	Status     metav1.ConditionStatus
	Reason     string
	Message    string
	Generation int64
}

type pending struct {
	issued *Issued
	ready  *Ready
	bundle *string
}

// Writer queues status changes per request and writes the latest of them at most once per interval.
// Its zero value is not usable; make one with New.
type Writer struct {
	client   versioned.Interface
	cache    certapilisters.ServingCertRequestLister
	interval time.Duration
	queue    *controller.Queue[types.NamespacedName]

	mu      sync.Mutex
	pending map[types.NamespacedName]*pending
}

// New returns a Writer that writes each request's status at most once per interval, with workers
// writes at a time.
func New(client versioned.Interface, interval time.Duration, workers int) *Writer {
	w := &Writer{
		client:   client,
		interval: interval,
		pending:  map[types.NamespacedName]*pending{},
	}
	w.queue = controller.NewQueue(controller.QueueOptions[types.NamespacedName]{
		Name: "servingcertrequest-status", Workers: workers, Sync: w.sync,
		BackoffBase: 100 * time.Millisecond, BackoffMax: 30 * time.Second,
	})
	return w
}

// RecordIssued notes a certificate issued for key; a later one for the same key replaces it before it is written.
func (w *Writer) RecordIssued(key types.NamespacedName, issued Issued) {
	w.mu.Lock()
	p := w.entry(key)
	if p.issued == nil || !issued.IssuedAt.Before(p.issued.IssuedAt) {
		p.issued = &issued
	}
	w.mu.Unlock()
	w.queue.AddAfter(key, w.interval)
}

// SetBundle notes the trust bundle clients of key's Service should use now (after a CA rotation step), so
// status.caBundle follows the CA even for requests nobody re-issued yet.
func (w *Writer) SetBundle(key types.NamespacedName, bundle string) {
	w.mu.Lock()
	w.entry(key).bundle = &bundle
	w.mu.Unlock()
	w.queue.AddAfter(key, w.interval)
}

// SetReady notes the Ready condition for key.
func (w *Writer) SetReady(key types.NamespacedName, ready Ready) {
	w.mu.Lock()
	w.entry(key).ready = &ready
	w.mu.Unlock()
	w.queue.AddAfter(key, w.interval)
}

func (w *Writer) entry(key types.NamespacedName) *pending {
	p := w.pending[key]
	if p == nil {
		p = &pending{}
		w.pending[key] = p
	}
	return p
}

// UseCache makes the Writer compute each write against the term's ServingCertRequest cache and send it
// as one guarded patch, falling back to a read and an update when the cache cannot answer. Call it
// before Run.
func (w *Writer) UseCache(cache certapilisters.ServingCertRequestLister) { w.cache = cache }

// Run writes queued status until ctx ends.
func (w *Writer) Run(ctx context.Context) error {
	w.queue.Run(ctx)
	return nil
}

// sync writes the change pending for key. On failure it puts the change back, unless something newer
// arrived meanwhile, and the queue retries with backoff.
func (w *Writer) sync(ctx context.Context, key types.NamespacedName) (controller.Result, error) {
	w.mu.Lock()
	p := w.pending[key]
	delete(w.pending, key)
	w.mu.Unlock()
	if p == nil {
		return controller.Result{}, nil
	}
	if err := w.write(ctx, key, p); err != nil {
		w.mu.Lock()
		cur := w.entry(key)
		if cur.issued == nil {
			cur.issued = p.issued
		}
		if cur.ready == nil {
			cur.ready = p.ready
		}
		if cur.bundle == nil {
			cur.bundle = p.bundle
		}
		w.mu.Unlock()
		return controller.Result{}, fmt.Errorf("writing ServingCertRequest status: %w", err)
	}
	return controller.Result{}, nil
}

func (w *Writer) write(ctx context.Context, key types.NamespacedName, p *pending) error {
	if w.cache != nil {
		done, err := w.patchFromCache(ctx, key, p)
		if done || (err != nil && !apierrors.IsConflict(err)) {
			return err
		}
		// Not in the cache yet, or the cache is behind (the patch's resourceVersion test failed): read
		// and write.
	}
	scrs := w.client.CertapiV1alpha1().ServingCertRequests(key.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := scrs.Get(ctx, key.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile: nothing to report on
		}
		if err != nil {
			return fmt.Errorf("getting %s: %w", key, err)
		}
		changed := Apply(obj, p.issued, p.ready)
		if p.bundle != nil && obj.Status.CABundle != *p.bundle && obj.Status.Certificate != "" {
			obj.Status.CABundle = *p.bundle
			changed = true
		}
		if !changed {
			return nil
		}
		_, err = scrs.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: "certapi"})
		return err
	})
}

// patchFromCache writes the change with one write of the status subresource, computed against the term's
// informer cache and guarded by the cached resourceVersion, instead of a read and a write: two requests
// become one for each issuance. done is false when the cache cannot answer (the request is not in it
// yet); a Conflict error means the cache is behind. The cache drops status.certificate and
// status.caBundle (see controller.Context), so they are written whenever they are set, never read.
func (w *Writer) patchFromCache(ctx context.Context, key types.NamespacedName, p *pending) (done bool, err error) {
	cached, err := w.cache.ServingCertRequests(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("getting %s from the cache: %w", key, err)
	}
	obj := cached.DeepCopy()
	before := obj.Status.SerialNumber
	changed := Apply(obj, p.issued, p.ready)
	if p.bundle != nil && obj.Status.SerialNumber != "" {
		obj.Status.CABundle = *p.bundle
	}
	scrs := w.client.CertapiV1alpha1().ServingCertRequests(key.Namespace)
	if obj.Status.SerialNumber != before {
		// A new certificate: every status field is known (the cache's, and the certificate and bundle just
		// issued), so the whole status goes in one update. The server decodes it once, where a merge patch
		// costs it an encode, a merge and a decode more, and this is the write that follows every
		// issuance. The status strategy keeps the stored spec, labels and annotations, and the server
		// keeps the stored managedFields when none are sent.
		_, err = scrs.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: "certapi"})
		if apierrors.IsNotFound(err) {
			return true, nil // deleted meanwhile: nothing to report on
		}
		return err == nil, err
	}
	// No new certificate: patch only what changed, leaving the stored certificate alone.
	status := map[string]any{}
	if p.bundle != nil && obj.Status.SerialNumber != "" {
		// Whether it differs is not known here (the cache drops the bundle); an equal one writes nothing.
		status["caBundle"] = *p.bundle
	}
	if changed {
		status["conditions"] = obj.Status.Conditions
		status["observedGeneration"] = obj.Status.ObservedGeneration
	}
	if len(status) == 0 {
		return true, nil
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": cached.ResourceVersion},
		"status":   status,
	})
	if err != nil {
		return false, fmt.Errorf("encoding the status patch of %s: %w", key, err)
	}
	_, err = scrs.Patch(ctx, key.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "certapi"}, "status")
	if apierrors.IsNotFound(err) {
		return true, nil // deleted meanwhile: nothing to report on
	}
	return err == nil, err
}

// Apply merges an issued certificate and a Ready condition into obj's status, and reports whether
// anything changed. An issued certificate older than the one in status is ignored.
func Apply(obj *certapiv1alpha1.ServingCertRequest, issued *Issued, ready *Ready) bool {
	changed := false
	st := &obj.Status
	if issued != nil && (st.LastIssued == nil || !issued.IssuedAt.Before(st.LastIssued.Time)) && st.SerialNumber != issued.SerialNumber {
		st.Certificate = issued.Certificate
		st.CABundle = issued.CABundle
		st.SerialNumber = issued.SerialNumber
		st.NotBefore = ptrTime(issued.NotBefore)
		st.NotAfter = ptrTime(issued.NotAfter)
		st.RenewalTime = ptrTime(issued.RenewalTime)
		st.LastIssued = ptrTime(issued.IssuedAt)
		changed = true
		if ready == nil {
			ready = &Ready{Status: metav1.ConditionTrue, Reason: ReasonIssued, Message: "certificate " + issued.SerialNumber + " issued", Generation: obj.Generation}
		}
	}
	if ready != nil {
		cond := metav1.Condition{
			Type:               certapiv1alpha1.ConditionReady,
			Status:             ready.Status,
			Reason:             ready.Reason,
			Message:            ready.Message,
			ObservedGeneration: ready.Generation,
		}
		if meta.SetStatusCondition(&st.Conditions, cond) {
			changed = true
		}
		if ready.Generation > st.ObservedGeneration {
			st.ObservedGeneration = ready.Generation
			changed = true
		}
	}
	return changed
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}
