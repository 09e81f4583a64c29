// Package erasure is the leader's controller that erases what certapi keeps of the past once a distrust
// completes: the distrust drops the distrusted CAs' keys from the CA record, and this controller makes
// etcd's history and the scheduled snapshots forget them too (compaction, defragmentation of every
// member, a fresh snapshot replacing the older ones). It runs once per completed distrust; the
// CertificateAuthority's HistoryErased condition records that it did, so that a new leader neither redoes
// it nor leaves it undone. From the moment a distrust takes effect it also records the distrusted CAs
// outside etcd, in the snapshot directory (snapshot.DistrustedFileName), so that a restore of a snapshot or
// backup taken before refuses to bring them back.
package erasure

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	certapilisters "github.com/certapi/certapi/pkg/generated/listers/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/snapshot"
)

// ReportingController is the reportingController of the CertificateAuthority's HistoryErased Events.
const ReportingController = "certapi.dev/erasure"

// Eraser erases etcd's history and the snapshots taken before, and says where the record of distrusted CAs
// lives (*Etcd is one).
type Eraser interface {
	Erase(ctx context.Context) (Outcome, error)
	// DistrustedRecord is the file that lists every distrusted CA for `certapi snapshot restore` to refuse
	// (snapshot.DistrustedFileName in the snapshot directory); empty when there is nowhere to keep it.
	DistrustedRecord() string
}

// Options configure New.
type Options struct {
	// Context is the leadership term's. Required.
	Context *controller.Context
	// Eraser does the erasing. Required.
	Eraser Eraser
	// Clock tells the time of the condition; the real clock when nil.
	Clock clock.PassiveClock
}

// Controller erases the history of each completed distrust once. Make one per leadership term with New;
// the term runs it.
type Controller struct {
	o        Options
	client   versioned.Interface
	lister   certapilisters.CertificateAuthorityLister
	recorder events.EventRecorder
	queue    *controller.Queue[string]
}

// New checks o and declares the CertificateAuthority informer on the term's Context.
func New(o Options) (*Controller, error) {
	switch {
	case o.Context == nil:
		return nil, errors.New("erasure: Options.Context is required")
	case o.Eraser == nil:
		return nil, errors.New("erasure: Options.Eraser is required")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	inf := o.Context.CertapiInformers.Certapi().V1alpha1().CertificateAuthorities()
	c := &Controller{
		o:        o,
		client:   o.Context.Certapi,
		lister:   inf.Lister(),
		recorder: o.Context.Recorder(ReportingController),
	}
	// A failed erasure is tried again with backoff, up to a minute apart, for as long as the term lasts;
	// it never ends the term.
	c.queue = controller.NewQueue(controller.QueueOptions[string]{
		Name: "erasure", Workers: 1, Sync: c.sync,
		BackoffBase: time.Second, BackoffMax: time.Minute,
		Quiet: apierrors.IsConflict,
	})
	o.Context.Watch(inf.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueue() },
		UpdateFunc: func(any, any) { c.enqueue() },
	})
	return c, nil
}

func (c *Controller) enqueue() { c.queue.Add(certapiv1alpha1.CertificateAuthorityName) }

// Run erases until ctx ends: the term calls it once every cache has synced.
func (c *Controller) Run(ctx context.Context) error { return c.queue.Run(ctx) }

// ShutDown stops the queue of a Controller whose term ended before it ran.
func (c *Controller) ShutDown() { c.queue.ShutDown() }

func (c *Controller) sync(ctx context.Context, _ string) (controller.Result, error) {
	obj, err := c.lister.Get(certapiv1alpha1.CertificateAuthorityName)
	if apierrors.IsNotFound(err) {
		return controller.Result{}, nil
	}
	if err != nil {
		return controller.Result{}, err
	}
	// Recorded as soon as a distrust takes effect (and brought up to date when it completes): a snapshot
	// taken meanwhile holds the distrusted CAs too. A failure to record does not hold the erasure back; both
	// are tried again.
	recordErr := RecordDistrusted(ctx, c.o.Eraser.DistrustedRecord(), obj.Status)
	if !due(obj.Status) {
		return controller.Result{}, recordErr
	}
	logger := klog.FromContext(ctx).WithValues("distrust", obj.Status.Distrust.Distrust)
	ctx = klog.NewContext(ctx, logger)
	out, eraseErr := c.o.Eraser.Erase(ctx)
	cond := condition(obj.Status.Distrust, out, eraseErr, obj.Generation, c.o.Clock.Now())
	switch {
	case eraseErr != nil:
		logger.Error(eraseErr, "Erasing etcd's history after a distrust failed; trying again")
	case out.External:
		logger.Info("WARNING: a distrust completed, but certapi does not compact or defragment an etcd it does not own; the operator must", "message", cond.Message)
	default:
		logger.Info("Erased etcd's history and the snapshots taken before a distrust", "message", cond.Message)
	}
	if err := c.report(ctx, obj, cond); err != nil {
		return controller.Result{}, errors.Join(recordErr, eraseErr, err)
	}
	return controller.Result{}, errors.Join(recordErr, eraseErr)
}

// RecordDistrusted adds the CAs of st's distrust to the record of distrusted CAs at path
// (snapshot.DistrustedFileName), or brings their entries up to date (distrustedRecord), writing the file
// only when it changes; with no path or no distrust it does nothing. The leader's controller calls it, and
// so does every replica as it watches CertificateAuthority/default, so that each replica's volume holds the
// record whoever led when the distrust took effect.
func RecordDistrusted(ctx context.Context, path string, st certapiv1alpha1.CertificateAuthorityStatus) error {
	if path == "" || st.Distrust == nil || len(st.Distrust.Distrusted) == 0 {
		return nil
	}
	existing, err := snapshot.ReadDistrusted(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading the record of distrusted CAs to add distrust %q to it: %w", st.Distrust.Distrust, err)
	}
	next, changed := distrustedRecord(existing, st)
	if !changed {
		return nil
	}
	if err := snapshot.WriteDistrusted(path, next); err != nil {
		return fmt.Errorf("recording the CAs of distrust %q: %w", st.Distrust.Distrust, err)
	}
	klog.FromContext(ctx).Info("Recorded the distrusted CAs where a restore checks for them", "path", path, "distrust", st.Distrust.Distrust, "distrustedCAs", len(next))
	return nil
}

// eventReasons are the reasons of the Events that tell each HistoryErased reason.
var eventReasons = map[string]string{
	certapiv1alpha1.HistoryErasedReasonErased:       "HistoryErased",
	certapiv1alpha1.HistoryErasedReasonExternalEtcd: "HistoryNotErased",
	certapiv1alpha1.HistoryErasedReasonFailed:       "HistoryEraseFailed",
}

// report writes cond into the CertificateAuthority's status and records it as an Event, unless it says
// what the condition already says (a failure tried again).
func (c *Controller) report(ctx context.Context, obj *certapiv1alpha1.CertificateAuthority, cond metav1.Condition) error {
	if prev := meta.FindStatusCondition(obj.Status.Conditions, cond.Type); prev != nil &&
		prev.Status == cond.Status && prev.Reason == cond.Reason && prev.Message == cond.Message {
		return nil
	}
	eventType := corev1.EventTypeNormal
	if cond.Status != metav1.ConditionTrue {
		eventType = corev1.EventTypeWarning
	}
	c.recorder.Eventf(controller.RegardingCA(obj), nil, eventType, eventReasons[cond.Reason], "EraseHistory", "%s", cond.Message)
	want := obj.DeepCopy()
	// Not meta.SetStatusCondition: it keeps the lastTransitionTime of a condition whose status does not
	// change, and due tells this distrust's erasure from the last one's by that time.
	meta.RemoveStatusCondition(&want.Status.Conditions, cond.Type)
	want.Status.Conditions = append(want.Status.Conditions, cond)
	if _, err := c.client.CertapiV1alpha1().CertificateAuthorities().UpdateStatus(ctx, want, metav1.UpdateOptions{FieldManager: certapiv1alpha1.FieldManager}); err != nil {
		return fmt.Errorf("writing CertificateAuthority/%s status: %w", certapiv1alpha1.CertificateAuthorityName, err)
	}
	return nil
}
