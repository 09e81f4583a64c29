// Package rotation is the leader's CA lifecycle loop: it reads CertificateAuthority/default, moves the
// rotation on (publish Next, switch, retire, distrust) through the issuer, tells the injector when the
// bundle changes, and keeps the CertificateAuthority's status current.
package rotation

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/castatus"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/signer"
)

// Targets is what the rotation needs of the injector.
type Targets interface {
	// AllHold reports whether every injectable target holds exactly bundle.
	AllHold(bundle []byte) bool
	// Trigger makes the injector re-check every target now.
	Trigger()
	// Summary counts the targets by state.
	Summary() certapiv1alpha1.InjectionSummary
}

// Options configure the loop.
type Options struct {
	Client  versioned.Interface
	Issuer  *issuer.Issuer
	Targets Targets
	// Reissued reports whether every delivered certificate comes from the given CA.
	Reissued func(ca *x509.Certificate) bool
	// Grace is the least time between publishing Next and letting it sign.
	Grace time.Duration
	// MaxCertificateDuration bounds every leaf's lifetime, and so how long a Retiring CA stays.
	MaxCertificateDuration time.Duration
	// Interval is how often the loop looks; one second keeps the CertificateAuthority current.
	Interval time.Duration
	// Recorder records Events on the CertificateAuthority; optional.
	Recorder events.EventRecorder
	// BundleChanged, when set, is called after steps that changed the bundle, with the new bundle.
	BundleChanged func(ctx context.Context, bundle []byte)
}

// Run moves rotations on until ctx ends.
func Run(ctx context.Context, o Options) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := step(ctx, o); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "CA lifecycle step")
		}
	}, o.Interval)
}

func step(ctx context.Context, o Options) error {
	obj, err := castatus.Get(ctx, o.Client)
	if err != nil {
		return err
	}
	before, ok := o.Issuer.State()
	if !ok {
		return nil
	}
	caDuration := certapiv1alpha1.DefaultCADuration
	if obj.Spec.Duration != nil {
		caDuration = obj.Spec.Duration.Duration
	}
	req := issuer.RotationRequest{
		ForceRotation: obj.Spec.ForceRotation,
		Distrust:      obj.Spec.Distrust,
		CADuration:    caDuration,
		Policy:        signer.RotationPolicy{Grace: o.Grace, MaxCertificateDuration: o.MaxCertificateDuration},
	}
	// With no injector there is nothing to wait for but the grace period.
	req.NextEverywhere = o.Targets == nil || o.Targets.AllHold(before.Bundle())
	if o.Reissued != nil {
		req.Reissued = o.Reissued(before.Active.Certificate)
	}
	steps, err := o.Issuer.Rotate(ctx, req)
	if len(steps) > 0 {
		after, _ := o.Issuer.State()
		for _, s := range steps {
			announce(o, obj, s, after)
		}
		if o.Targets != nil {
			o.Targets.Trigger()
		}
		if o.BundleChanged != nil {
			o.BundleChanged(ctx, after.Bundle())
		}
	}
	if err != nil {
		return err
	}
	after, ok := o.Issuer.State()
	if !ok {
		return nil
	}
	var summary *certapiv1alpha1.InjectionSummary
	if o.Targets != nil {
		s := o.Targets.Summary()
		summary = &s
	}
	return castatus.Sync(ctx, o.Client, obj, after, summary)
}

// announce makes each step visible: log, Event, metric. A forced switch is loud on purpose.
func announce(o Options, obj *certapiv1alpha1.CertificateAuthority, s signer.RotationStep, after signer.Authorities) {
	active := signer.FormatSerialNumber(after.Active.Certificate.SerialNumber)
	var msg, eventType = "", corev1.EventTypeNormal
	switch s {
	case signer.StepPublishNext:
		msg = fmt.Sprintf("published the Next CA %s in the bundle; it signs once every target holds it and %s have passed", signer.FormatSerialNumber(after.Next.Certificate.SerialNumber), o.Grace)
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
	if o.Recorder != nil {
		o.Recorder.Eventf(obj, nil, eventType, string(s), "RotateCA", "%s", msg)
	}
}
