// Package status writes ServingCertRequest status for the leader, coalesced off the request path: many
// issuances against one request in a short time make one status write, not one each.
package status

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
)

// Condition reasons certapi writes on a request's Ready condition.
const (
	ReasonIssued         = "Issued"
	ReasonRenewing       = "Renewing"
	ReasonSecretConflict = "SecretConflict"
	ReasonDenied         = "Denied"
	ReasonPending        = "Pending"
	// ReasonNamespaceNotOptedIn: spec.secretName is set, but the namespace has not opted in to Secret
	// delivery (label certapi.dev/secret-delivery=enabled), or no longer has.
	ReasonNamespaceNotOptedIn = "NamespaceNotOptedIn"
	// ReasonSecretAccessForbidden: the namespace opted in, but kube-apiserver refuses certapi's
	// ServiceAccount the Secret access delivery needs (no RoleBinding to the secret-delivery ClusterRole,
	// or an admission policy refuses the write).
	ReasonSecretAccessForbidden = "SecretAccessForbidden"
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

// pending is what is still to be written for one request, and when its status was last written.
type pending struct {
	issued *Issued
	ready  *Ready
	bundle *string
	// written is when the last write for this request was made; zero when none was made within the
	// interval. A key with a write that recent has its next look scheduled at written + interval.
	written time.Time
	// lastReady is the Ready condition that write set, if it set one: the same condition set again
	// within the interval, and nothing else, is not written again (Secret delivery marks a request
	// current when its own Secret comes back through the watch, often before the request's status
	// does, with the condition it has just written).
	lastReady *Ready
}

// empty reports whether nothing is waiting to be written.
func (p *pending) empty() bool { return p.issued == nil && p.ready == nil && p.bundle == nil }

// Updater writes one request's status: it applies mutate to the stored request and writes the status
// when mutate reports a change. The server's own storage implements it in-process
// (servingcertrequest.StatusUpdater), which is the one way the leader writes request status; unit tests
// give a double of it.
type Updater interface {
	UpdateStatus(ctx context.Context, key types.NamespacedName, mutate func(*certapiv1alpha1.ServingCertRequest) bool) error
}

// Writer queues status changes per request and writes each request's status at most once per
// interval: a change to a request not written within the interval is written at once, later ones
// wait for the interval's end and go in one write. Its zero value is not usable; make one with New.
type Writer struct {
	updater  Updater
	interval time.Duration
	queue    *controller.Queue[types.NamespacedName]
	now      func() time.Time

	mu      sync.Mutex
	pending map[types.NamespacedName]*pending
}

// New returns a Writer that writes each request's status through updater at most once per interval,
// with workers writes at a time.
func New(updater Updater, interval time.Duration, workers int) *Writer {
	return newWriter(updater, interval, workers, clock.RealClock{})
}

func newWriter(updater Updater, interval time.Duration, workers int, clk clock.WithTicker) *Writer {
	w := &Writer{
		updater:  updater,
		interval: interval,
		pending:  map[types.NamespacedName]*pending{},
		now:      clk.Now,
	}
	w.queue = controller.NewQueue(controller.QueueOptions[types.NamespacedName]{
		Name: "servingcertrequest-status", Workers: workers, Sync: w.sync,
		BackoffBase: 100 * time.Millisecond, BackoffMax: 30 * time.Second, Clock: clk,
	})
	return w
}

// RecordIssued notes a certificate issued for key; a later one for the same key replaces it before it is written.
func (w *Writer) RecordIssued(key types.NamespacedName, issued Issued) {
	w.change(key, func(p *pending) {
		if p.issued == nil || !issued.IssuedAt.Before(p.issued.IssuedAt) {
			p.issued = &issued
		}
	})
}

// SetBundle notes the trust bundle clients of key's Service should use now (after a CA rotation step), so
// status.caBundle follows the CA even for requests nobody re-issued yet.
func (w *Writer) SetBundle(key types.NamespacedName, bundle string) {
	w.change(key, func(p *pending) { p.bundle = &bundle })
}

// SetReady notes the Ready condition for key.
func (w *Writer) SetReady(key types.NamespacedName, ready Ready) {
	w.change(key, func(p *pending) { p.ready = &ready })
}

// change records a change for key and queues key at once unless a write within the interval already
// scheduled its next look.
func (w *Writer) change(key types.NamespacedName, f func(*pending)) {
	w.mu.Lock()
	p := w.entry(key)
	f(p)
	now := p.written.IsZero()
	w.mu.Unlock()
	if now {
		w.queue.Add(key)
	}
}

func (w *Writer) entry(key types.NamespacedName) *pending {
	p := w.pending[key]
	if p == nil {
		p = &pending{}
		w.pending[key] = p
	}
	return p
}

// Run writes queued status until ctx ends. Its run is its queue's, which runs once.
func (w *Writer) Run(ctx context.Context) error { return w.queue.Run(ctx) }

// ShutDown stops the queue of a Writer whose term ended before it ran.
func (w *Writer) ShutDown() { w.queue.ShutDown() }

// sync writes the change pending for key, then looks at key again after the interval to write what
// arrived meanwhile. When nothing did, the key's entry goes: its next change is written at once. On
// failure the change is put back, unless something newer arrived meanwhile, and the queue retries with
// backoff.
func (w *Writer) sync(ctx context.Context, key types.NamespacedName) (controller.Result, error) {
	w.mu.Lock()
	p := w.pending[key]
	if p == nil {
		w.mu.Unlock()
		return controller.Result{}, nil
	}
	if p.empty() {
		if !p.written.IsZero() && w.now().Sub(p.written) < w.interval {
			// Queued again by a retry or a stray add: the scheduled look will come.
			w.mu.Unlock()
			return controller.Result{}, nil
		}
		delete(w.pending, key)
		w.mu.Unlock()
		return controller.Result{}, nil
	}
	change := pending{issued: p.issued, ready: p.ready, bundle: p.bundle}
	p.issued, p.ready, p.bundle = nil, nil, nil
	if change.issued == nil && change.bundle == nil && p.lastReady != nil && *change.ready == *p.lastReady {
		// The condition this Writer wrote last, within the interval: the stored status holds it already.
		w.mu.Unlock()
		return controller.Result{After: w.interval}, nil
	}
	w.mu.Unlock()

	if err := w.updater.UpdateStatus(ctx, key, func(obj *certapiv1alpha1.ServingCertRequest) bool {
		return applyPending(obj, &change)
	}); err != nil {
		w.mu.Lock()
		cur := w.entry(key)
		if cur.issued == nil {
			cur.issued = change.issued
		}
		if cur.ready == nil {
			cur.ready = change.ready
		}
		if cur.bundle == nil {
			cur.bundle = change.bundle
		}
		w.mu.Unlock()
		return controller.Result{}, fmt.Errorf("writing ServingCertRequest status: %w", err)
	}
	w.mu.Lock()
	p = w.entry(key)
	p.written = w.now()
	switch {
	case change.ready != nil:
		p.lastReady = change.ready
	case change.issued != nil:
		p.lastReady = nil // Apply may have set a Ready condition of its own
	}
	w.mu.Unlock()
	return controller.Result{After: w.interval}, nil
}

// applyPending merges p into obj's status and reports whether anything changed. A new bundle is taken
// only by a request that has a certificate: one without has no trust bundle of its own yet.
func applyPending(obj *certapiv1alpha1.ServingCertRequest, p *pending) bool {
	changed := Apply(obj, p.issued, p.ready)
	if p.bundle != nil && obj.Status.SerialNumber != "" && obj.Status.CABundle != *p.bundle {
		obj.Status.CABundle = *p.bundle
		changed = true
	}
	return changed
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
