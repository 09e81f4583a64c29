package signer

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// Authorities is the set of CAs a cluster trusts and where a rotation stands. Rotation keeps trust
// overlapping: a Next CA is trusted everywhere before it signs, and a Retiring CA stays trusted until no
// certificate it signed can still be valid.
type Authorities struct {
	// Active signs new and renewed certificates.
	Active *CA
	// Next is published in the bundle and becomes Active once every target trusts it.
	Next *CA
	// NextPublished is when Next entered the bundle; the grace period counts from it.
	NextPublished time.Time
	// Anchor is the anchor of the bundles certapi publishes (BundleFor): the operator's choice, set by
	// whoever holds the Authorities from its configuration, never stored with them.
	Anchor BundleAnchor
	// Pending, for a CA that is an intermediate of an organisation's CA (RotationInput.Upstream), is the
	// key and certificate request of the next CA while they wait for the organisation's signature; it
	// becomes Next when the signed certificate is imported (ImportNext). Never set together with Next.
	Pending *PendingCA
	// Retiring CAs no longer sign and leave the bundle at their Until time. They hold their certificate
	// only: a CA's private key is dropped the moment it stops signing (see CA.WithoutKey).
	Retiring []Retiring
	// ForceRotation is the last spec.forceRotation value a rotation was started for.
	ForceRotation string
	// Distrust is the last spec.distrust value acted upon.
	Distrust string
	// SwitchedAt is when Active last changed; ForcedSwitch says the gate had not opened then.
	SwitchedAt   time.Time
	ForcedSwitch bool
	// LastStepAt is when the last rotation step was planned, by the clock of the replica that saved it.
	// Plan refuses to move while the clock reads more than ClockTolerance before it (CheckClock). Zero in
	// a record written before it was kept: the latest of SwitchedAt, NextPublished and the distrust times
	// stands in.
	LastStepAt time.Time
}

// ClockTolerance is how far the clock may read before the last saved rotation step (LastStepAt) before
// Plan refuses to move: NTP corrections and the clock difference between replicas stay well within it,
// and it equals Backdate, by which every CA's notBefore is set back.
const ClockTolerance = Backdate

// ErrClockBehind is wrapped by the errors of a Plan that refuses to move because the clock reads earlier
// than the stored state allows: before the Active CA's notBefore, or more than ClockTolerance before
// the last saved step. Acting on such a clock (or on the wrong one it read before it was corrected) can
// leave a cluster with no CA that signs now; an admin fixes the clock, or as a last resort sets
// spec.distrust, which makes a CA valid at the clock as it reads.
var ErrClockBehind = errors.New("the clock is behind the CA record")

// Retiring is a CA that no longer signs.
type Retiring struct {
	CA *CA
	// Until is when it leaves the bundle: the switch time plus the longest certificate lifetime, or its own
	// notAfter, whichever is first. Unused when Distrusted.
	Until time.Time
	// Distrusted CAs leave the bundle as soon as every delivered certificate comes from the Active CA, or
	// at the distrust deadline (RotationPolicy.DistrustDeadline after DistrustedAt), whichever is first.
	Distrusted bool
	// DistrustedAt is when it was distrusted. Zero in a record written before it was kept: the
	// Authorities' SwitchedAt stands in (see DistrustedSince).
	DistrustedAt time.Time
}

// RotationPolicy holds the durations a rotation is timed by.
type RotationPolicy struct {
	// Grace is the least time between publishing Next and letting it sign, for kubelet's Secret propagation.
	Grace time.Duration
	// MaxCertificateDuration is the longest lifetime of any certificate a CA signs.
	MaxCertificateDuration time.Duration
	// DistrustDwell is the least time a distrusted CA stays in the bundle after the distrust, even once
	// every delivered certificate is re-issued: clients of the servingcerts subresource, which certapi
	// does not track, re-issue when they see the distrust (pkg/servingcert within a second), and need
	// that long to do it before the old CA stops being trusted.
	DistrustDwell time.Duration
	// DistrustDeadline, when positive, is the longest a distrusted CA stays in the bundle: once it has
	// passed, the CA leaves every bundle whatever it still waits for (StepDistrustDeadline). Zero: no
	// deadline.
	DistrustDeadline time.Duration
}

// RotationInput is what the world looks like to one planning step.
type RotationInput struct {
	Now time.Time
	// ForceRotation and Distrust are the CertificateAuthority's spec values.
	ForceRotation, Distrust string
	// NextEverywhere: every injectable target holds the current bundle (which includes Next).
	NextEverywhere bool
	// Reissued: every delivered certificate now comes from the Active CA.
	Reissued bool
	// NewCA makes a CA; the planner calls it at most once per step.
	NewCA func() (*CA, error)
	// Upstream says the CA is to be an intermediate of an organisation's CA: where a rotation would make
	// a Next CA, the planner makes a certificate request instead (NewRequest, StepRequestNext), and the
	// rotation waits until the signed certificate is imported (ImportNext). An Active CA that is
	// self-signed is replaced at once so (the first start, or after a distrust). Without it, a pending
	// request is dropped (StepDropRequest): the operator went back to self-signed CAs.
	Upstream bool
	// NewRequest makes a CA key and its certificate request; the planner calls it at most once per step,
	// and only with Upstream.
	NewRequest func(reason PendingReason) (*PendingCA, error)
}

// RotationStep names what one planning step did.
type RotationStep string

// The steps a rotation goes through.
const (
	StepNone           RotationStep = ""
	StepPublishNext    RotationStep = "PublishNext"
	StepSwitch         RotationStep = "Switch"
	StepForcedSwitch   RotationStep = "ForcedSwitch"
	StepRetire         RotationStep = "Retire"
	StepDistrust       RotationStep = "Distrust"
	StepDropDistrusted RotationStep = "DropDistrusted"
	// StepDistrustDeadline drops a distrusted CA at its deadline although not everything it waited for
	// was re-issued.
	StepDistrustDeadline RotationStep = "DistrustDeadline"
	// StepRequestNext makes the next CA's key and certificate request, to be signed by an organisation's
	// CA (RotationInput.Upstream).
	StepRequestNext RotationStep = "RequestNext"
	// StepDropRequest drops a pending certificate request that is no longer wanted (Upstream is off).
	StepDropRequest RotationStep = "DropRequest"
)

// Plan returns the Authorities after the next step that is due, and which step that was (StepNone when
// nothing is due). Callers persist the result, one step at a time, and call again with fresh inputs
// (the rotation loop re-arms after each step). It never mutates a.
//
// Clock safety: Plan refuses (an error wrapping ErrClockBehind) while CheckClock does, except for a new
// distrust, which makes a CA valid at the clock as it reads. A switch, forced or not, needs Next to have
// been published at least p.Grace earlier and to be valid now; the CA that leaves Active keeps no key.
func (a Authorities) Plan(in RotationInput, p RotationPolicy) (Authorities, RotationStep, error) {
	if a.Active == nil {
		return a, StepNone, errors.New("no Active CA")
	}
	distrust := in.Distrust != "" && in.Distrust != a.Distrust
	if err := a.CheckClock(in.Now); err != nil && !distrust {
		return a, StepNone, err
	}
	out, step, err := a.plan(in, p, distrust)
	if err != nil || step == StepNone {
		return a, StepNone, err
	}
	if nb := out.Active.Certificate.NotBefore; in.Now.Before(nb) {
		// Never reached by the steps above; kept so that no future step can store such a state.
		return a, StepNone, fmt.Errorf("%w: step %s would make the CA %s Active, which is not valid until %s (the clock reads %s)",
			ErrClockBehind, step, FormatSerialNumber(out.Active.Certificate.SerialNumber), nb.UTC().Format(time.RFC3339), in.Now.UTC().Format(time.RFC3339))
	}
	out.LastStepAt = in.Now
	return out, step, nil
}

func (a Authorities) plan(in RotationInput, p RotationPolicy, distrust bool) (Authorities, RotationStep, error) {
	out := a
	out.Retiring = append([]Retiring(nil), a.Retiring...)

	// Emergency: every CA older than the new one is distrusted; the new one signs at once, and none of
	// the old ones signs again.
	if distrust {
		ca, err := in.NewCA()
		if err != nil {
			return a, StepNone, err
		}
		for i, r := range out.Retiring {
			if r.Distrusted {
				// Already distrusted by an earlier distrust: its deadline still counts from then.
				out.Retiring[i].DistrustedAt = a.DistrustedSince(r)
				continue
			}
			out.Retiring[i] = Retiring{CA: r.CA.WithoutKey(), Distrusted: true, DistrustedAt: in.Now}
		}
		out.Retiring = append(out.Retiring, Retiring{CA: a.Active.WithoutKey(), Distrusted: true, DistrustedAt: in.Now})
		if a.Next != nil {
			out.Retiring = append(out.Retiring, Retiring{CA: a.Next.WithoutKey(), Distrusted: true, DistrustedAt: in.Now})
		}
		// A pending request is dropped with the CAs it would have followed: its key sat in the same record.
		out.Active, out.Next, out.NextPublished, out.Pending = ca, nil, time.Time{}, nil
		out.Distrust = in.Distrust
		out.SwitchedAt, out.ForcedSwitch = in.Now, true
		return out, StepDistrust, nil
	}
	for i, r := range out.Retiring {
		since := a.DistrustedSince(r)
		if r.Distrusted && in.Reissued && !in.Now.Before(since.Add(p.DistrustDwell)) {
			out.Retiring = append(out.Retiring[:i:i], out.Retiring[i+1:]...)
			return out, StepDropDistrusted, nil
		}
		if r.Distrusted && p.DistrustDeadline > 0 && !in.Now.Before(since.Add(p.DistrustDeadline)) {
			out.Retiring = append(out.Retiring[:i:i], out.Retiring[i+1:]...)
			return out, StepDistrustDeadline, nil
		}
		if !r.Distrusted && !in.Now.Before(r.Until) {
			out.Retiring = append(out.Retiring[:i:i], out.Retiring[i+1:]...)
			return out, StepRetire, nil
		}
	}

	// A CA is as good as its chain: the life of an intermediate ends with the first certificate of its
	// chain that expires (ChainNotAfter; a self-signed CA's own notAfter).
	life := a.Active.ChainNotAfter().Sub(a.Active.Certificate.NotBefore)
	left := a.Active.ChainNotAfter().Sub(in.Now)
	if a.Pending != nil && !in.Upstream {
		out.Pending = nil
		return out, StepDropRequest, nil
	}
	if a.Next == nil {
		forced := in.ForceRotation != "" && in.ForceRotation != a.ForceRotation
		if in.Upstream {
			return a.planRequest(in, forced, left <= life/3)
		}
		if forced || left <= life/3 {
			ca, err := in.NewCA()
			if err != nil {
				return a, StepNone, err
			}
			out.Next, out.NextPublished = ca, in.Now
			if forced {
				out.ForceRotation = in.ForceRotation
			}
			return out, StepPublishNext, nil
		}
		return a, StepNone, nil
	}

	// Even a forced switch waits for the grace period: a Next CA published a moment ago (after a clock
	// jump, say) is in no bundle yet.
	if in.Now.Before(a.NextPublished.Add(p.Grace)) {
		return a, StepNone, nil
	}
	gateOpen := in.NextEverywhere
	deadline := left <= life/6
	if !gateOpen && !deadline {
		return a, StepNone, nil
	}
	if nb := a.Next.Certificate.NotBefore; in.Now.Before(nb) {
		return a, StepNone, fmt.Errorf("%w: the Next CA %s is not valid until %s and the clock reads %s; not switching to it",
			ErrClockBehind, FormatSerialNumber(a.Next.Certificate.SerialNumber), nb.UTC().Format(time.RFC3339), in.Now.UTC().Format(time.RFC3339))
	}
	until := in.Now.Add(p.MaxCertificateDuration)
	if na := a.Active.Certificate.NotAfter; na.Before(until) {
		until = na
	}
	out.Retiring = append(out.Retiring, Retiring{CA: a.Active.WithoutKey(), Until: until})
	out.Active, out.Next, out.NextPublished = a.Next, nil, time.Time{}
	out.SwitchedAt, out.ForcedSwitch = in.Now, !gateOpen
	if !gateOpen {
		return out, StepForcedSwitch, nil
	}
	return out, StepSwitch, nil
}

// planRequest is plan's step for a CA under an organisation's CA with no Next CA: a certificate request
// when a rotation is due (or forced, or the Active CA is self-signed), none while one is pending.
func (a Authorities) planRequest(in RotationInput, forced, due bool) (Authorities, RotationStep, error) {
	if a.Pending != nil {
		// Waiting for the signature. A new forceRotation value is not taken yet: it starts a rotation
		// once this one is done, as it would while a Next CA waits for the gate.
		return a, StepNone, nil
	}
	var reason PendingReason
	switch {
	case forced:
		reason = PendingForceRotation
	case a.Active.SelfSigned():
		reason = PendingSelfSigned
	case due:
		reason = PendingRotation
	default:
		return a, StepNone, nil
	}
	if in.NewRequest == nil {
		return a, StepNone, errors.New("a CA certificate request is due, and no way to make one was given")
	}
	p, err := in.NewRequest(reason)
	if err != nil {
		return a, StepNone, err
	}
	out := a
	out.Retiring = append([]Retiring(nil), a.Retiring...)
	out.Pending = p
	if forced {
		out.ForceRotation = in.ForceRotation
	}
	return out, StepRequestNext, nil
}

// CheckClock returns an error wrapping ErrClockBehind when now is earlier than the state allows: before
// the Active CA's notBefore (it cannot sign), or more than ClockTolerance before the last saved step
// (the clock went back, or an earlier step was taken under a clock that was ahead). nil otherwise.
func (a Authorities) CheckClock(now time.Time) error {
	if a.Active == nil {
		return nil
	}
	if nb := a.Active.Certificate.NotBefore; now.Before(nb) {
		return fmt.Errorf("%w: the clock reads %s, before the Active CA %s's notBefore %s: the Active CA cannot sign, and no rotation step is taken until the clock is right",
			ErrClockBehind, now.UTC().Format(time.RFC3339), FormatSerialNumber(a.Active.Certificate.SerialNumber), nb.UTC().Format(time.RFC3339))
	}
	if last := a.lastStep(); now.Add(ClockTolerance).Before(last) {
		return fmt.Errorf("%w: the clock reads %s, %s before the last rotation step was saved (%s); no rotation step is taken until the clock is right",
			ErrClockBehind, now.UTC().Format(time.RFC3339), last.Sub(now).Round(time.Second), last.UTC().Format(time.RFC3339))
	}
	return nil
}

// lastStep is the latest time the state was saved at, as far as it tells: LastStepAt, or for a record
// written before that was kept, the latest time it holds.
func (a Authorities) lastStep() time.Time {
	last := a.LastStepAt
	later := func(t time.Time) {
		if t.After(last) {
			last = t
		}
	}
	later(a.SwitchedAt)
	later(a.NextPublished)
	if a.Pending != nil {
		later(a.Pending.CreatedAt)
	}
	for _, r := range a.Retiring {
		later(r.DistrustedAt)
	}
	return last
}

// DistrustedSince is when the distrusted CA r was distrusted: its DistrustedAt, or for a record written
// before that was kept, the switch the distrust made.
func (a Authorities) DistrustedSince(r Retiring) time.Time {
	if !r.DistrustedAt.IsZero() {
		return r.DistrustedAt
	}
	return a.SwitchedAt
}

// DistrustDeadline is the earliest time at which a distrusted CA leaves the bundle whatever it still
// waits for; zero when no CA is distrusted or p has no deadline.
func (a Authorities) DistrustDeadline(p RotationPolicy) time.Time {
	var due time.Time
	for _, r := range a.Retiring {
		if !r.Distrusted || p.DistrustDeadline <= 0 {
			continue
		}
		if t := a.DistrustedSince(r).Add(p.DistrustDeadline); due.IsZero() || t.Before(due) {
			due = t
		}
	}
	return due
}

// Certificates returns every CA certificate clients must trust, in the bundle's fixed order: Active,
// Next, then Retiring in the order they retired. For a CA an organisation's CA signed it is certapi's own
// certificate, not the root, so Bundle is BundleFor(AnchorIntermediate).
func (a Authorities) Certificates() []*x509.Certificate {
	var certs []*x509.Certificate
	if a.Active != nil {
		certs = append(certs, a.Active.Certificate)
	}
	if a.Next != nil {
		certs = append(certs, a.Next.Certificate)
	}
	for _, r := range a.Retiring {
		certs = append(certs, r.CA.Certificate)
	}
	return certs
}

// Bundle is the byte-stable PEM trust bundle of Certificates (see BundleFor for the operator's choice of
// anchor when a CA carries a chain).
func (a Authorities) Bundle() []byte {
	return EncodeBundle(a.Certificates()...)
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// NextDue returns the earliest time at which a step becomes due by the clock alone (a Retiring CA's
// Until, a distrust deadline, the end of the grace period, the one-third and one-sixth marks of the Active CA's life), or the
// zero time when no such step is ahead. Steps that wait on the world (targets, re-issuance, spec
// changes) are not in it: their own events start them. The rotation loop sleeps until then. The grace
// end counts only while it is ahead of now: once it has passed, the switch waits on the targets, and a
// time in the past would wake the loop again and again until they hold the bundle.
func (a Authorities) NextDue(p RotationPolicy, now time.Time) time.Time {
	if a.Active == nil {
		return time.Time{}
	}
	var due time.Time
	consider := func(t time.Time) {
		if due.IsZero() || t.Before(due) {
			due = t
		}
	}
	for _, r := range a.Retiring {
		if !r.Distrusted {
			consider(r.Until)
		}
	}
	if d := a.DistrustDeadline(p); !d.IsZero() {
		consider(d)
	}
	notBefore, notAfter := a.Active.Certificate.NotBefore, a.Active.ChainNotAfter()
	life := notAfter.Sub(notBefore)
	if a.Next == nil && a.Pending == nil {
		consider(notAfter.Add(-life / 3))
	} else if a.Next == nil {
		// A pending request waits for an import, which wakes the loop itself.
	} else {
		// A switch, forced or not, waits for the grace period.
		graceEnd := a.NextPublished.Add(p.Grace)
		if graceEnd.After(now) {
			consider(graceEnd)
		}
		consider(latest(notAfter.Add(-life/6), graceEnd))
	}
	return due
}
