// Package rotation is the leader's CA lifecycle controller: it moves a rotation on (publish Next, switch,
// retire, distrust) through the issuer, tells the term when the bundle changed, and keeps
// CertificateAuthority/default's status current. It is driven by events, not a clock tick: the
// CertificateAuthority informer (spec changes), the issuer (a new CA or bundle), the injector and Secret
// delivery (progress towards the gate), and a timer for the next step the clock alone makes due.
package rotation

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/castatus"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	certapilisters "github.com/certapi/certapi/pkg/generated/listers/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/signer"
)

// ReportingController is the reportingController of the CertificateAuthority's Events.
const ReportingController = "certapi.dev/rotation"

// distrustRecheck is how often a pending distrust looks again at what it waits for (every delivered
// Secret and every replica re-issued): only while one is pending, never when idle.
const distrustRecheck = time.Second

// distrustDwell is the least time a distrusted CA stays in the bundle (signer.RotationPolicy's
// DistrustDwell): pkg/servingcert re-issues within a second of seeing the distrust, and a watch event
// takes a moment to reach it.
const distrustDwell = 5 * time.Second

// progressDelay coalesces the injector's progress reports into at most a few looks a second.
const progressDelay = 200 * time.Millisecond

// Targets is what the rotation needs of the injector.
type Targets interface {
	// AllHold reports whether every injectable target holds exactly bundle.
	AllHold(bundle []byte) bool
	// Summary counts the targets by state.
	Summary() certapiv1alpha1.InjectionSummary
}

// Authority is what the rotation needs of the issuer.
type Authority interface {
	State() (signer.Authorities, bool)
	Rotate(ctx context.Context, req issuer.RotationRequest) ([]signer.RotationStep, error)
	issuer.Authority
}

// Options configure New.
type Options struct {
	// Context is the leadership term's; the CertificateAuthority informer comes from it. Required.
	Context *controller.Context
	// Authority is the issuer. Required.
	Authority Authority
	// Targets is the injector. Required: without it the gate would check nothing but the grace period.
	Targets Targets
	// Reissued reports whether every delivered certificate comes from the given CA; asked only while a
	// distrusted CA waits to leave the bundle. Required.
	Reissued func(ctx context.Context, ca *x509.Certificate) bool
	// Grace is the least time between publishing Next and letting it sign.
	Grace time.Duration
	// MaxCertificateDuration bounds every leaf's lifetime, and so how long a Retiring CA stays.
	MaxCertificateDuration time.Duration
	// BundleChanged, when set, is called after steps that changed the bundle, with the new bundle.
	BundleChanged func(ctx context.Context, bundle []byte)
	// Clock tells the time for the next deadline; the real clock when nil.
	Clock clock.PassiveClock
}

// Controller moves CA rotations on. Make one per leadership term with New and call Run once.
type Controller struct {
	o        Options
	client   versioned.Interface
	lister   certapilisters.CertificateAuthorityLister
	informer cache.SharedIndexInformer
	recorder events.EventRecorder
	queue    *controller.Queue[string]
}

// New checks o and registers the CertificateAuthority informer with the term.
func New(o Options) (*Controller, error) {
	switch {
	case o.Context == nil:
		return nil, errors.New("rotation: Options.Context is required")
	case o.Authority == nil:
		return nil, errors.New("rotation: Options.Authority is required")
	case o.Targets == nil:
		return nil, errors.New("rotation: Options.Targets is required")
	case o.Reissued == nil:
		return nil, errors.New("rotation: Options.Reissued is required")
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	inf := o.Context.CertapiInformers.Certapi().V1alpha1().CertificateAuthorities()
	c := &Controller{
		o:        o,
		client:   o.Context.Certapi,
		lister:   inf.Lister(),
		informer: inf.Informer(),
		recorder: o.Context.Recorder(ReportingController),
	}
	c.queue = controller.NewQueue(controller.QueueOptions[string]{
		Name: "rotation", Workers: 1, Sync: c.sync,
		BackoffBase: time.Second, BackoffMax: 30 * time.Second,
		Quiet: apierrors.IsConflict,
	})
	return c, nil
}

// Enqueue makes the controller look again now.
func (c *Controller) Enqueue() { c.queue.Add(castatus.Name) }

// Progress makes the controller look again shortly: the injector calls it after each target it synced,
// which may open the gate. A burst of progress (a thousand targets taking a new bundle) makes a few
// looks, not a thousand status writes.
func (c *Controller) Progress() { c.queue.AddAfter(castatus.Name, progressDelay) }

// Run drives rotations until ctx ends. Run may be called once.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	reg, err := c.informer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.Enqueue() },
		UpdateFunc: func(any, any) { c.Enqueue() },
		DeleteFunc: func(any) { c.Enqueue() },
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return fmt.Errorf("watching CertificateAuthorities: %w", err)
	}
	defer func() { _ = c.informer.RemoveEventHandler(reg) }()
	if !cache.WaitFor(ctx, "CertificateAuthority cache", reg.HasSyncedChecker()) {
		return nil
	}
	defer c.o.Authority.AddListener(issuer.ListenerFunc(c.Enqueue))()
	c.Enqueue()
	c.queue.Run(ctx)
	return nil
}

func (c *Controller) sync(ctx context.Context, _ string) (controller.Result, error) {
	obj, err := c.lister.Get(castatus.Name)
	if apierrors.IsNotFound(err) {
		// The leader creates the CA's public face on first start; the informer brings it back here.
		_, err := c.client.CertapiV1alpha1().CertificateAuthorities().Create(ctx,
			&certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: castatus.Name}}, metav1.CreateOptions{FieldManager: "certapi"})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return controller.Result{}, fmt.Errorf("creating CertificateAuthority/%s: %w", castatus.Name, err)
		}
		return controller.Result{}, nil
	}
	if err != nil {
		return controller.Result{}, err
	}
	before, ok := c.o.Authority.State()
	if !ok {
		return controller.Result{}, nil // the term is ending
	}
	caDuration := certapiv1alpha1.DefaultCADuration
	if obj.Spec.Duration != nil {
		caDuration = obj.Spec.Duration.Duration
	}
	policy := signer.RotationPolicy{Grace: c.o.Grace, MaxCertificateDuration: c.o.MaxCertificateDuration, DistrustDwell: distrustDwell}
	req := issuer.RotationRequest{
		ForceRotation:  obj.Spec.ForceRotation,
		Distrust:       obj.Spec.Distrust,
		CADuration:     caDuration,
		Policy:         policy,
		NextEverywhere: c.o.Targets.AllHold(before.Bundle()),
	}
	if distrustPending(before) {
		req.Reissued = c.o.Reissued(ctx, before.Active.Certificate)
	}
	steps, err := c.o.Authority.Rotate(ctx, req)
	after, ok := c.o.Authority.State()
	if len(steps) > 0 && ok {
		for _, s := range steps {
			c.announce(obj, s, after)
		}
		if c.o.BundleChanged != nil {
			c.o.BundleChanged(ctx, after.Bundle())
		}
	}
	if err != nil {
		return controller.Result{}, err
	}
	if !ok {
		return controller.Result{}, nil
	}
	summary := c.o.Targets.Summary()
	if err := castatus.Sync(ctx, c.client, obj, after, &summary); err != nil {
		return controller.Result{}, err
	}
	return controller.Result{After: c.wait(after, policy)}, nil
}

// wait is how long until the clock alone makes a step due, or distrustRecheck while a distrust waits
// for re-issuance; zero when nothing is ahead.
func (c *Controller) wait(a signer.Authorities, p signer.RotationPolicy) time.Duration {
	var d time.Duration
	if due := a.NextDue(p); !due.IsZero() {
		// A moment past the due time, so that Plan, which compares with the clock, finds it due.
		d = max(due.Sub(c.o.Clock.Now())+10*time.Millisecond, 10*time.Millisecond)
	}
	if distrustPending(a) && (d == 0 || d > distrustRecheck) {
		d = distrustRecheck
	}
	return d
}

// distrustPending reports whether a distrusted CA is still in the bundle.
func distrustPending(a signer.Authorities) bool {
	for _, r := range a.Retiring {
		if r.Distrusted {
			return true
		}
	}
	return false
}

// announce makes each step visible: log, Event, metric. A forced switch is loud on purpose.
func (c *Controller) announce(obj *certapiv1alpha1.CertificateAuthority, s signer.RotationStep, after signer.Authorities) {
	active := signer.FormatSerialNumber(after.Active.Certificate.SerialNumber)
	var msg, eventType = "", corev1.EventTypeNormal
	switch s {
	case signer.StepPublishNext:
		msg = fmt.Sprintf("published the Next CA %s in the bundle; it signs once every target holds it and %s have passed", signer.FormatSerialNumber(after.Next.Certificate.SerialNumber), c.o.Grace)
	case signer.StepSwitch:
		msg = fmt.Sprintf("the CA %s is Active now; the previous one is Retiring", active)
	case signer.StepForcedSwitch:
		eventType = corev1.EventTypeWarning
		msg = fmt.Sprintf("FORCED switch to the CA %s: one sixth of the old CA's life is left and not every target holds the new bundle; see status.injection", active)
	case signer.StepRetire:
		msg = "a Retiring CA left the bundle: no certificate it signed can still be valid"
	case signer.StepDistrust:
		eventType = corev1.EventTypeWarning
		msg = fmt.Sprintf("distrust %q: the new CA %s signs from now on; the distrusted CA leaves the bundle once every Secret is re-issued", after.Distrust, active)
	case signer.StepDropDistrusted:
		msg = "the distrusted CA left the bundle: every delivered certificate comes from the Active CA"
	}
	metrics.RotationSteps.WithLabelValues(string(s)).Inc()
	if eventType == corev1.EventTypeWarning {
		klog.InfoS("WARNING: CA rotation step", "step", s, "message", msg)
	} else {
		klog.InfoS("CA rotation step", "step", s, "message", msg)
	}
	c.recorder.Eventf(regarding(obj), nil, eventType, string(s), "RotateCA", "%s", msg)
}

// regarding is the CertificateAuthority an Event is about, by reference only: informer objects carry no
// kind, and the whole object has no place in an Event or a log line.
func regarding(obj *certapiv1alpha1.CertificateAuthority) *certapiv1alpha1.CertificateAuthority {
	return &certapiv1alpha1.CertificateAuthority{
		TypeMeta:   metav1.TypeMeta{APIVersion: certapiv1alpha1.SchemeGroupVersion.String(), Kind: "CertificateAuthority"},
		ObjectMeta: metav1.ObjectMeta{Name: obj.Name, UID: obj.UID, ResourceVersion: obj.ResourceVersion},
	}
}
