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
	"slices"
	"strings"
	"sync/atomic"
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
	"github.com/certapi/certapi/pkg/controller/servedcert"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	certapilisters "github.com/certapi/certapi/pkg/generated/listers/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/signer"
)

// ReportingController is the reportingController of the CertificateAuthority's Events.
const ReportingController = "certapi.dev/rotation"

// distrustDwell is the least time a distrusted CA stays in the bundle (signer.RotationPolicy's
// DistrustDwell): pkg/servingcert re-issues within a second of seeing the distrust, and a watch event
// takes a moment to reach it.
const distrustDwell = 5 * time.Second

// progressDelay coalesces the injector's progress reports into at most a few looks a second.
const progressDelay = 200 * time.Millisecond

// Target is a set of objects the bundle must reach before a Next CA may sign: the injector (every
// object that opted in) and the ClusterTrustBundle publisher. Each tells its listeners when its state may
// have changed, which may open the gate.
type Target interface {
	// AllHold reports whether every injectable object of the target holds exactly bundle: the rotation
	// gate. Objects that are skipped, in conflict, or whose write kube-apiserver refused for good
	// (Failed: a tenant's ConfigMap too large to take the bundle) do not count, so that no tenant can
	// hold a rotation.
	AllHold(bundle []byte) bool
	// InjectionSummary counts the target's objects by state.
	InjectionSummary() certapiv1alpha1.InjectionSummary
	controller.Notifier
}

// Authority is what the rotation needs of the issuer.
type Authority interface {
	State() (signer.Authorities, bool)
	Rotate(ctx context.Context, req issuer.RotationRequest) ([]signer.RotationStep, error)
	// Recovery says what the leader did with the CAs certapi had published when it created the CA
	// record with none stored (nil: it did not), and whether that was in this term.
	Recovery() (rec *issuer.Recovery, thisTerm bool)
	issuer.Authority
}

// Options configure New.
type Options struct {
	// Context is the leadership term's; the CertificateAuthority informer comes from it. Required.
	Context *controller.Context
	// Authority is the issuer. Required.
	Authority Authority
	// Targets are what the bundle must reach before a Next CA signs, summed in status.injection. At least
	// one is required: without any the gate would check nothing but the grace period.
	Targets []Target
	// Reissued are what tells of progress towards a pending distrust: Secret delivery (a delivered Secret
	// changed), the replicas' serving records.
	Reissued []controller.Notifier
	// Distrust tells how far a pending distrust has come against the Active CA active: what it waits
	// for (Secrets certapi delivers, certapi's replicas) and what it does not. Asked only while a
	// distrusted CA is in the bundle. Required.
	Distrust func(ctx context.Context, active *x509.Certificate) DistrustProgress
	// Grace is the least time between publishing Next and letting it sign.
	Grace time.Duration
	// Served, when set, is the served certificate check: a pending distrust also waits for the endpoints
	// it finds presenting a certificate of a distrusted CA that their bundle still verifies, and the
	// Retire step says which endpoints still presented the retired CA's. Nil when the check is off.
	Served Served
	// DistrustDeadline, when positive, is the longest a distrusted CA stays in the bundle: after it, the CA
	// leaves every bundle whatever it still waits for, with a Warning Event and a log line.
	DistrustDeadline time.Duration
	// MaxCertificateDuration bounds every leaf's lifetime, and so how long a Retiring CA stays.
	MaxCertificateDuration time.Duration
	// BundleChanged, when set, is called after steps that changed the bundle, with the new bundle.
	BundleChanged func(ctx context.Context, bundle []byte)
	// Clock tells the time for the next deadline; the real clock when nil.
	Clock clock.PassiveClock
	// Conditions are further conditions of CertificateAuthority/default the term found (APIsServed),
	// written with the rest of its status.
	Conditions []metav1.Condition
	// UpstreamSignerName, when set, is the signer each pending CA certificate request is asked of through
	// a CertificateSigningRequest (--ca-upstream=CertificateSigningRequest): status.pendingRequest names it.
	UpstreamSignerName string
}

// Served is what the rotation needs of the served certificate check (pkg/controller/servedcert).
type Served interface {
	// Presenting returns the endpoints whose last probe presented a leaf one of cas signed, and
	// whether the check has a view yet.
	Presenting(cas []*x509.Certificate) ([]servedcert.PresentedEndpoint, bool)
	// Expedite has those endpoints probed again within seconds until they present another; nil ends it.
	Expedite(cas []*x509.Certificate)
}

// Controller moves CA rotations on. Make one per leadership term with New; the term runs it.
type Controller struct {
	o        Options
	client   versioned.Interface
	lister   certapilisters.CertificateAuthorityLister
	recorder events.EventRecorder
	queue    *controller.Queue[string]

	// lastUnmanaged is the report of unmanaged Secrets last recorded as an Event this term, so that each
	// distinct report is recorded once. Only sync (one worker) touches it.
	lastUnmanaged string
	// clockBehind is whether the last Rotate was refused for the clock (noteClock). Only sync touches it.
	clockBehind bool
	// distrusting is whether the last sync left a distrust pending: only then do re-issued Secrets and
	// replicas (Reissued) make the controller look again.
	distrusting atomic.Bool
	// recoveryAnnounced is whether the Event of a CA record created in this term with none stored was
	// recorded. Only sync touches it.
	recoveryAnnounced bool
}

// DistrustProgress is how far a pending distrust has come: what it waits for, and what it does not.
type DistrustProgress struct {
	// Known is false when that could not be told (the caches have not synced, etcd did not answer): the
	// distrust then waits, up to its deadline.
	Known bool
	// PendingSecrets are the Secrets certapi delivers for an existing request whose certificate is not
	// from the Active CA yet; UnmanagedSecrets those it will not re-issue (see
	// certapiv1alpha1.DistrustStatus).
	PendingSecrets, UnmanagedSecrets certapiv1alpha1.SecretsSummary
	// PendingReplicas is the number of certapi replicas not serving with a certificate of the Active CA.
	PendingReplicas int
	// PendingEndpoints are the served endpoints that present a certificate of a distrusted CA that their
	// bundle still verifies: kube-apiserver's calls to them fail once it leaves the bundle.
	PendingEndpoints certapiv1alpha1.EndpointsSummary
}

// Done reports whether everything the distrust waits for comes from the Active CA.
func (p DistrustProgress) Done() bool {
	return p.Known && p.PendingSecrets.Count == 0 && p.PendingReplicas == 0 && p.PendingEndpoints.Count == 0
}

// New checks o and declares on the term's Context the CertificateAuthority informer and the listeners:
// the Authority (a new CA or bundle), every target (progress towards the gate) and every Reissued
// notifier (progress of a pending distrust).
func New(o Options) (*Controller, error) {
	switch {
	case o.Context == nil:
		return nil, errors.New("rotation: Options.Context is required")
	case o.Authority == nil:
		return nil, errors.New("rotation: Options.Authority is required")
	case len(o.Targets) == 0:
		return nil, errors.New("rotation: Options.Targets is required")
	case o.Distrust == nil:
		return nil, errors.New("rotation: Options.Distrust is required")
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
	c.queue = controller.NewQueue(controller.QueueOptions[string]{
		Name: "rotation", Workers: 1, Sync: c.sync,
		BackoffBase: time.Second, BackoffMax: 30 * time.Second,
		Quiet: apierrors.IsConflict,
	})
	cc := o.Context
	cc.Watch(inf.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.Enqueue() },
		UpdateFunc: func(any, any) { c.Enqueue() },
		DeleteFunc: func(any) { c.Enqueue() },
	})
	cc.Listen(o.Authority, c.Enqueue)
	for _, t := range o.Targets {
		cc.Listen(t, c.Progress)
	}
	for _, n := range o.Reissued {
		cc.Listen(n, c.Reissued)
	}
	c.Enqueue() // looked at once the caches have synced, whatever they hold
	return c, nil
}

// Enqueue makes the controller look again now.
func (c *Controller) Enqueue() { c.queue.Add(certapiv1alpha1.CertificateAuthorityName) }

// Progress makes the controller look again shortly: the injector calls it after each target it synced,
// which may open the gate. A burst of progress (a thousand targets taking a new bundle) makes a few
// looks, not a thousand status writes.
func (c *Controller) Progress() {
	c.queue.AddAfter(certapiv1alpha1.CertificateAuthorityName, progressDelay)
}

// Reissued makes the controller look again shortly while a distrust is pending, and does nothing
// otherwise: Secret delivery calls it when a delivered Secret or a request changes, and the leader when
// a replica's serving record changes, which is what a pending distrust waits for. A pending distrust is
// driven by those changes and its dwell and deadline timers, never by polling.
func (c *Controller) Reissued() {
	if c.distrusting.Load() {
		c.Progress()
	}
}

// Run drives rotations until ctx ends: the term calls it once every cache has synced. Its run is its
// queue's, which runs once.
func (c *Controller) Run(ctx context.Context) error { return c.queue.Run(ctx) }

// ShutDown stops the queue of a Controller whose term ended before it ran.
func (c *Controller) ShutDown() { c.queue.ShutDown() }

// allHold is the gate: every target holds bundle.
func (c *Controller) allHold(bundle []byte) bool {
	for _, t := range c.o.Targets {
		if !t.AllHold(bundle) {
			return false
		}
	}
	return true
}

func (c *Controller) sync(ctx context.Context, _ string) (controller.Result, error) {
	obj, err := c.lister.Get(certapiv1alpha1.CertificateAuthorityName)
	if apierrors.IsNotFound(err) {
		// The leader creates the CA's public face on first start; the informer brings it back here.
		_, err := c.client.CertapiV1alpha1().CertificateAuthorities().Create(ctx,
			&certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: certapiv1alpha1.CertificateAuthorityName}}, metav1.CreateOptions{FieldManager: certapiv1alpha1.FieldManager})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return controller.Result{}, fmt.Errorf("creating CertificateAuthority/%s: %w", certapiv1alpha1.CertificateAuthorityName, err)
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
	policy := signer.RotationPolicy{Grace: c.o.Grace, MaxCertificateDuration: c.o.MaxCertificateDuration,
		DistrustDwell: distrustDwell, DistrustDeadline: c.o.DistrustDeadline}
	req := issuer.RotationRequest{
		ForceRotation:  obj.Spec.ForceRotation,
		Distrust:       obj.Spec.Distrust,
		CADuration:     caDuration,
		Policy:         policy,
		NextEverywhere: c.allHold(before.Published()),
	}
	// Only while a distrust is pending: what it waits for, against the Active CA.
	var progress *DistrustProgress
	if distrustPending(before) {
		p := c.progress(ctx, before)
		progress = &p
		req.Reissued = p.Done()
	}
	steps, err := c.o.Authority.Rotate(ctx, req)
	c.noteClock(ctx, obj, err)
	after, ok := c.o.Authority.State()
	if ok && distrustPending(after) && (progress == nil || !after.Active.Certificate.Equal(before.Active.Certificate)) {
		p := c.progress(ctx, after) // a distrust just started
		progress = &p
	}
	if ok && !distrustPending(after) && c.o.Served != nil {
		c.o.Served.Expedite(nil)
	}
	if len(steps) > 0 && ok {
		for _, s := range steps {
			c.announce(ctx, obj, s, before, after, progress, policy)
		}
		if slices.Contains(steps, signer.StepRetire) {
			c.reportRetired(ctx, obj, before, after)
		}
		if c.o.BundleChanged != nil {
			c.o.BundleChanged(ctx, after.Published())
		}
	}
	if err != nil {
		return controller.Result{}, err
	}
	if !ok {
		return controller.Result{}, nil
	}
	summary := SumTargets(c.o.Targets)
	metrics.ObserveInjection(summary.Targets, summary.UpToDate, summary.Skipped, summary.Conflicts, summary.Failed)
	distrust := distrustStatus(distrustInput{
		Previous: obj.Status.Distrust, Before: before, After: after, Steps: steps, Progress: progress,
		PendingTargets: pendingTargets(summary),
		Policy:         policy, Now: c.o.Clock.Now(),
	})
	c.distrusting.Store(distrustPending(after))
	if distrustPending(after) {
		c.reportUnmanaged(ctx, obj, after, progress)
	}
	recovery, recoveredNow := c.o.Authority.Recovery()
	recovered := castatus.Recovered(recovery)
	if recoveredNow && !c.recoveryAnnounced {
		c.recoveryAnnounced = true
		c.recorder.Eventf(controller.RegardingCA(obj), nil, corev1.EventTypeWarning, recovered.Reason, "CreateCA", "%s", truncate(recovered.Message))
	}
	if err := castatus.Sync(ctx, c.client, obj, after, c.o.UpstreamSignerName, &summary, distrust, recovered, c.o.Conditions...); err != nil {
		return controller.Result{}, err
	}
	return controller.Result{After: c.wait(after, policy)}, nil
}

// progress is how far the distrust pending in a has come: what Options.Distrust tells, and the served
// endpoints that still present a certificate of a distrusted CA their bundle verifies (which the check is
// asked to probe again within seconds until they move).
func (c *Controller) progress(ctx context.Context, a signer.Authorities) DistrustProgress {
	p := c.o.Distrust(ctx, a.Active.Certificate)
	if c.o.Served == nil {
		return p
	}
	distrusted := distrustedCAs(a)
	c.o.Served.Expedite(distrusted)
	eps, known := c.o.Served.Presenting(distrusted)
	p.Known = p.Known && known
	p.PendingEndpoints = stillVerified(eps)
	return p
}

// stillVerified counts and names the endpoints of eps whose certificate their bundle verifies now: those
// a CA's removal would break. Those that fail already (expired, for another name) are not waited for.
func stillVerified(eps []servedcert.PresentedEndpoint) certapiv1alpha1.EndpointsSummary {
	var s certapiv1alpha1.EndpointsSummary
	for _, e := range eps {
		if e.State.Failing() {
			continue
		}
		s.Count++
		if len(s.Names) < maxNames {
			s.Names = append(s.Names, e.Name)
		}
	}
	return s
}

// maxNames bounds the names of a summary, as status's other summaries.
const maxNames = 10

// distrustedCAs are a's distrusted CA certificates.
func distrustedCAs(a signer.Authorities) []*x509.Certificate {
	var out []*x509.Certificate
	for _, r := range a.Retiring {
		if r.Distrusted {
			out = append(out, r.CA.Certificate)
		}
	}
	return out
}

// ReasonRetiredWhileServed is the reason of the Warning Event of a Retire step that removed a CA some
// endpoint still presented a certificate of.
const ReasonRetiredWhileServed = "RetiredWhileServed"

// reportRetired says, in a Warning Event and the log, which served endpoints still presented a
// certificate of a CA that a Retire step just removed from the bundle. Every certificate it signed has
// expired by then, so kube-apiserver's calls to them failed already; the served check reports them as
// Untrusted from now on.
func (c *Controller) reportRetired(ctx context.Context, obj *certapiv1alpha1.CertificateAuthority, before, after signer.Authorities) {
	if c.o.Served == nil {
		return
	}
	var retired []*x509.Certificate
	for _, r := range before.Retiring {
		if !slices.ContainsFunc(after.Retiring, func(o signer.Retiring) bool { return o.CA.Certificate.Equal(r.CA.Certificate) }) {
			retired = append(retired, r.CA.Certificate)
		}
	}
	eps, _ := c.o.Served.Presenting(retired)
	if len(eps) == 0 {
		return
	}
	names := make([]string, 0, len(eps))
	for _, e := range eps {
		names = append(names, e.Name)
	}
	var serials []string
	for _, r := range retired {
		serials = append(serials, signer.FormatSerialNumber(r.SerialNumber))
	}
	msg := fmt.Sprintf("retired the CA %s while %d served endpoints still presented a certificate it signed (expired, so kube-apiserver's calls to them fail): %s",
		strings.Join(serials, ", "), len(eps), strings.Join(names[:min(len(names), maxNames)], ", "))
	if len(names) > maxNames {
		msg += fmt.Sprintf(" and %d more", len(names)-maxNames)
	}
	klog.FromContext(ctx).Info("WARNING: a retired CA is still served", "retired", serials, "endpoints", len(eps))
	c.recorder.Eventf(controller.RegardingCA(obj), nil, corev1.EventTypeWarning, ReasonRetiredWhileServed, "RotateCA", "%s", truncate(msg))
}

// maxFailedTargets bounds InjectionSummary.FailedTargets, as each target bounds its own.
const maxFailedTargets = 10

// SumTargets adds up the targets' summaries: status.injection counts every object of every target.
func SumTargets(targets []Target) certapiv1alpha1.InjectionSummary {
	var s certapiv1alpha1.InjectionSummary
	for _, t := range targets {
		ts := t.InjectionSummary()
		s.Targets += ts.Targets
		s.UpToDate += ts.UpToDate
		s.Skipped += ts.Skipped
		s.Conflicts += ts.Conflicts
		s.Failed += ts.Failed
		for _, f := range ts.FailedTargets {
			if len(s.FailedTargets) < maxFailedTargets {
				s.FailedTargets = append(s.FailedTargets, f)
			}
		}
	}
	return s
}

// pendingTargets is the number of injection targets still to take the current bundle: neither up to
// date, nor skipped, nor in conflict, nor Failed (refused for good: reported, never waited for).
func pendingTargets(s certapiv1alpha1.InjectionSummary) int32 {
	return max(s.Targets-s.UpToDate-s.Skipped-s.Conflicts-s.Failed, 0)
}

// ReasonClockBehind is the reason of the Warning Event, and the step label of the
// certapi_ca_rotation_steps_total count, of a rotation refused because the clock reads earlier than the
// CA record allows (signer.ErrClockBehind).
const ReasonClockBehind = "ClockBehind"

// noteClock makes a rotation refused for the clock loud, once per episode: a log line, a Warning Event
// and the steps metric. The refusal itself is retried with the queue's backoff until the clock is right.
func (c *Controller) noteClock(ctx context.Context, obj *certapiv1alpha1.CertificateAuthority, err error) {
	if !errors.Is(err, signer.ErrClockBehind) {
		if err == nil {
			c.clockBehind = false
		}
		return
	}
	if c.clockBehind {
		return
	}
	c.clockBehind = true
	metrics.RotationSteps.WithLabelValues(ReasonClockBehind).Inc()
	klog.FromContext(ctx).Info("WARNING: CA rotation refused: the clock is behind the CA record; fix the clock (NTP)", "err", err)
	c.recorder.Eventf(controller.RegardingCA(obj), nil, corev1.EventTypeWarning, ReasonClockBehind, "RotateCA", "%s", truncate(err.Error()))
}

// reportUnmanaged records a Warning Event naming the labelled Secrets a pending distrust does not wait
// for, once for each distinct report.
func (c *Controller) reportUnmanaged(ctx context.Context, obj *certapiv1alpha1.CertificateAuthority, after signer.Authorities, p *DistrustProgress) {
	if p == nil || !p.Known || p.UnmanagedSecrets.Count == 0 {
		return
	}
	msg := fmt.Sprintf("distrust %q: %s labelled %s=true hold certificates not signed by the Active CA %s, and certapi will not re-issue them "+
		"(no existing ServingCertRequest names them, they are in conflict, or they are not certapi's); the distrusted CA leaves the bundle "+
		"without waiting for them, and whoever uses them must replace them: %s",
		after.Distrust, countSecrets(p.UnmanagedSecrets), certapiv1alpha1.LabelManaged, signer.FormatSerialNumber(after.Active.Certificate.SerialNumber),
		namesOf(p.UnmanagedSecrets))
	if msg == c.lastUnmanaged {
		return
	}
	c.lastUnmanaged = msg
	klog.FromContext(ctx).Info("WARNING: a distrust does not wait for Secrets certapi will not re-issue", "distrust", after.Distrust,
		"count", p.UnmanagedSecrets.Count, "secrets", p.UnmanagedSecrets.Names)
	c.recorder.Eventf(controller.RegardingCA(obj), nil, corev1.EventTypeWarning, ReasonDistrustUnmanagedSecrets, "DistrustCA", "%s", truncate(msg))
}

// wait is how long until the clock alone makes a step due (a grace, a deadline, or the end of a pending
// distrust's dwell); zero when nothing is ahead. What a pending distrust waits for besides the clock
// arrives through Reissued.
func (c *Controller) wait(a signer.Authorities, p signer.RotationPolicy) time.Duration {
	return untilDue(a, p, c.o.Clock.Now())
}

// untilDue is wait's arithmetic: the time from now to the next step the clock makes due, a moment past
// it, so that Plan, which compares with the clock, finds it due.
func untilDue(a signer.Authorities, p signer.RotationPolicy, now time.Time) time.Duration {
	due := a.NextDue(p, now)
	for _, r := range a.Retiring {
		if !r.Distrusted {
			continue
		}
		if end := a.DistrustedSince(r).Add(p.DistrustDwell); end.After(now) && (due.IsZero() || end.Before(due)) {
			due = end
		}
	}
	if due.IsZero() {
		return 0
	}
	return max(due.Sub(now)+10*time.Millisecond, 10*time.Millisecond)
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

// announce makes each step visible: log, Event, metric. A forced switch, a distrust and its deadline are
// loud on purpose.
func (c *Controller) announce(ctx context.Context, obj *certapiv1alpha1.CertificateAuthority, s signer.RotationStep, before, after signer.Authorities,
	progress *DistrustProgress, policy signer.RotationPolicy) {
	active := signer.FormatSerialNumber(after.Active.Certificate.SerialNumber)
	var msg, eventType = "", corev1.EventTypeNormal
	switch s {
	case signer.StepPublishNext:
		msg = fmt.Sprintf("published the Next CA %s in the bundle; it signs once every target holds it and %s have passed", signer.FormatSerialNumber(after.Next.Certificate.SerialNumber), c.o.Grace)
	case signer.StepRequestNext:
		msg = fmt.Sprintf("made the next CA's key and certificate request (%s); it waits for the organisation's CA to sign it: "+
			"kubectl certapi ca request prints it, kubectl certapi ca import takes the certificate back; the Active CA %s signs until then, at the latest until %s",
			after.Pending.Reason, active, after.Active.ChainNotAfter().UTC().Format(time.RFC3339))
	case signer.StepDropRequest:
		msg = "dropped the pending CA certificate request: certapi no longer runs as an intermediate (--ca-upstream=None); the next rotation makes a self-signed CA"
	case signer.StepSwitch:
		msg = fmt.Sprintf("the CA %s is Active now; the previous one is Retiring", active)
	case signer.StepForcedSwitch:
		eventType = corev1.EventTypeWarning
		msg = fmt.Sprintf("FORCED switch to the CA %s: one sixth of the old CA's life is left and not every target holds the new bundle; see status.injection", active)
	case signer.StepRetire:
		msg = "a Retiring CA left the bundle: no certificate it signed can still be valid"
	case signer.StepDistrust:
		eventType = corev1.EventTypeWarning
		msg = fmt.Sprintf("distrust %q: the new CA %s signs from now on; every CA older than it is distrusted (%s) and leaves every bundle once every Secret certapi delivers "+
			"for an existing request, every certapi replica, and every endpoint of an injected webhook or APIService that presents a certificate of it, holds one of the new CA", after.Distrust, active, distrustedSerials(after))
		if d := after.DistrustDeadline(policy); !d.IsZero() {
			msg += fmt.Sprintf(", and at the latest at %s (--distrust-deadline %s)", d.UTC().Format(time.RFC3339), policy.DistrustDeadline)
		}
		if w := signer.RootAnchoredDistrust(after); w != "" {
			msg = w + "; " + msg
		}
	case signer.StepDropDistrusted:
		msg = fmt.Sprintf("the distrusted CA %s left the bundle: every Secret certapi delivers, every certapi replica, and every served endpoint that presented one of its certificates, holds a certificate of the Active CA",
			droppedSerials(before, after))
		if progress != nil && progress.UnmanagedSecrets.Count > 0 {
			msg += fmt.Sprintf("; %s that certapi does not re-issue still hold certificates of other CAs: %s",
				countSecrets(progress.UnmanagedSecrets), namesOf(progress.UnmanagedSecrets))
		}
	case signer.StepDistrustDeadline:
		eventType = corev1.EventTypeWarning
		msg = fmt.Sprintf("the distrust deadline passed (--distrust-deadline %s): the distrusted CA %s left every bundle although not everything was re-issued",
			policy.DistrustDeadline, droppedSerials(before, after))
		if progress != nil && progress.Known {
			var left []string
			if progress.PendingSecrets.Count > 0 {
				left = append(left, fmt.Sprintf("%s certapi delivers (%s)", countSecrets(progress.PendingSecrets), namesOf(progress.PendingSecrets)))
			}
			if n := progress.PendingReplicas; n == 1 {
				left = append(left, "1 certapi replica")
			} else if n > 1 {
				left = append(left, fmt.Sprintf("%d certapi replicas", n))
			}
			if e := progress.PendingEndpoints; e.Count > 0 {
				names := strings.Join(e.Names, ", ")
				if more := int(e.Count) - len(e.Names); more > 0 {
					names += fmt.Sprintf(" and %d more", more)
				}
				left = append(left, fmt.Sprintf("%d served endpoints (%s)", e.Count, names))
			}
			if len(left) > 0 {
				msg += fmt.Sprintf(": %s did not hold a certificate of the Active CA %s yet, and no longer verify until re-issued", strings.Join(left, " and "), active)
			}
		}
	}
	metrics.RotationSteps.WithLabelValues(string(s)).Inc()
	if eventType == corev1.EventTypeWarning {
		klog.FromContext(ctx).Info("WARNING: CA rotation step", "step", s, "message", msg)
	} else {
		klog.FromContext(ctx).Info("CA rotation step", "step", s, "message", msg)
	}
	c.recorder.Eventf(controller.RegardingCA(obj), nil, eventType, string(s), "RotateCA", "%s", truncate(msg))
}

// ReasonDistrustUnmanagedSecrets is the reason of the Warning Event that names the labelled Secrets a
// distrust does not wait for.
const ReasonDistrustUnmanagedSecrets = "DistrustUnmanagedSecrets"

// maxNote bounds an Event's note (events.k8s.io allows 1 KiB).
const maxNote = 1000

func truncate(s string) string {
	if len(s) <= maxNote {
		return s
	}
	return s[:maxNote-3] + "..."
}

// countSecrets says "1 Secret" or "N Secrets".
func countSecrets(s certapiv1alpha1.SecretsSummary) string {
	if s.Count == 1 {
		return "1 Secret"
	}
	return fmt.Sprintf("%d Secrets", s.Count)
}

// namesOf lists the Secrets a summary names, and how many more it counts.
func namesOf(s certapiv1alpha1.SecretsSummary) string {
	out := strings.Join(s.Names, ", ")
	if more := int(s.Count) - len(s.Names); more > 0 {
		out += fmt.Sprintf(" and %d more", more)
	}
	if out == "" {
		out = "none"
	}
	return out
}

// distrustedSerials lists the serials of the distrusted CAs in a.
func distrustedSerials(a signer.Authorities) string {
	var out []string
	for _, r := range a.Retiring {
		if r.Distrusted {
			out = append(out, signer.FormatSerialNumber(r.CA.Certificate.SerialNumber))
		}
	}
	return strings.Join(out, ", ")
}

// droppedSerials lists the serials of the distrusted CAs of before that after no longer holds.
func droppedSerials(before, after signer.Authorities) string {
	var out []string
	for _, r := range before.Retiring {
		if !r.Distrusted {
			continue
		}
		if !slices.ContainsFunc(after.Retiring, func(o signer.Retiring) bool { return o.CA.Certificate.Equal(r.CA.Certificate) }) {
			out = append(out, signer.FormatSerialNumber(r.CA.Certificate.SerialNumber))
		}
	}
	return strings.Join(out, ", ")
}
