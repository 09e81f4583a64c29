package rotation

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/castatus"
	"github.com/certapi/certapi/pkg/signer"
)

// distrustInput is everything distrustStatus looks at.
type distrustInput struct {
	// Previous is the CertificateAuthority's status.distrust as it stands.
	Previous *certapiv1alpha1.DistrustStatus
	// Before and After are the CAs before and after this sync's rotation steps, Steps those steps.
	Before, After signer.Authorities
	Steps         []signer.RotationStep
	// Progress is the distrust's progress against After's Active CA while a distrust is pending (and
	// against Before's when this sync ended it); nil when none was pending.
	Progress *DistrustProgress
	// PendingTargets is the number of injection targets that do not hold the current bundle.
	PendingTargets int32
	Policy         signer.RotationPolicy
	Now            time.Time
}

// distrustStatus is the status.distrust to write: a fresh one while a distrust is pending, the last one
// marked complete (and how) when this sync dropped the last distrusted CA, otherwise Previous as it is.
// A pure function of its input.
func distrustStatus(in distrustInput) *certapiv1alpha1.DistrustStatus {
	if distrustPending(in.After) {
		st := describe(in.After, in.Policy)
		if prev := in.Previous; prev != nil && prev.Distrust == st.Distrust && prev.CompletedAt == nil {
			// A distrust distrusts every older CA, and they leave one rotation step at a time: the list
			// keeps those that already left until the distrust completes.
			st.Distrusted = mergeRefs(prev.Distrusted, st.Distrusted)
			if prev.StartedAt.Before(&st.StartedAt) {
				st.StartedAt = prev.StartedAt
			}
		}
		if p := in.Progress; p != nil && p.Known {
			st.PendingSecrets = summaryOrNil(p.PendingSecrets)
			st.UnmanagedSecrets = summaryOrNil(p.UnmanagedSecrets)
			st.PendingReplicas = int32(p.PendingReplicas)
			st.PendingEndpoints = endpointsOrNil(p.PendingEndpoints)
		} else if prev := in.Previous; prev != nil && prev.Distrust == st.Distrust && prev.CompletedAt == nil {
			// Not known this time (a cache not synced yet): keep what was known.
			st.PendingSecrets, st.UnmanagedSecrets, st.PendingReplicas = prev.PendingSecrets, prev.UnmanagedSecrets, prev.PendingReplicas
			st.PendingEndpoints = prev.PendingEndpoints
		}
		st.PendingTargets = max(in.PendingTargets, 0)
		return st
	}
	byDeadline := slices.Contains(in.Steps, signer.StepDistrustDeadline)
	dropped := byDeadline || slices.Contains(in.Steps, signer.StepDropDistrusted)
	prev := in.Previous
	// A status that still says pending while no distrusted CA is left: the sync that dropped the last
	// one stored the CAs but lost its status write (a conflict with another status writer), and the
	// retry sees no step. It completes now: past its deadline by the deadline, leaving behind what was
	// last known pending; before it, re-issued.
	lost := !dropped && prev != nil && prev.CompletedAt == nil && prev.Distrust == in.After.Distrust
	if !dropped && !lost {
		return prev
	}
	st := describe(in.Before, in.Policy)
	if prev != nil && prev.Distrust == st.Distrust && prev.CompletedAt == nil {
		st = prev.DeepCopy()
	}
	now := metav1.NewTime(in.Now).Rfc3339Copy()
	st.CompletedAt, st.Completion, st.PendingTargets = &now, certapiv1alpha1.DistrustCompletionReissued, 0
	if lost {
		if prev.Deadline != nil && !in.Now.Before(prev.Deadline.Time) {
			st.Completion = certapiv1alpha1.DistrustCompletionDeadline
		} else {
			st.PendingSecrets, st.PendingReplicas, st.PendingEndpoints = nil, 0, nil
		}
		return st
	}
	st.PendingSecrets, st.PendingReplicas, st.PendingEndpoints = nil, 0, nil
	if p := in.Progress; p != nil && p.Known {
		st.UnmanagedSecrets = summaryOrNil(p.UnmanagedSecrets)
		if byDeadline {
			// What was left behind.
			st.PendingSecrets, st.PendingReplicas = summaryOrNil(p.PendingSecrets), int32(p.PendingReplicas)
			st.PendingEndpoints = endpointsOrNil(p.PendingEndpoints)
		}
	}
	if byDeadline {
		st.Completion = certapiv1alpha1.DistrustCompletionDeadline
	}
	return st
}

// describe is the part of a distrust's status that a's CAs tell: which CAs, since and until when.
func describe(a signer.Authorities, p signer.RotationPolicy) *certapiv1alpha1.DistrustStatus {
	st := &certapiv1alpha1.DistrustStatus{Distrust: a.Distrust}
	var started time.Time
	for _, r := range a.Retiring {
		if !r.Distrusted {
			continue
		}
		st.Distrusted = append(st.Distrusted, castatus.RefOf(r.CA))
		if since := a.DistrustedSince(r); started.IsZero() || since.Before(started) {
			started = since
		}
	}
	// Whole seconds, as stored: a value that would not survive the round trip would be rewritten on every look.
	st.StartedAt = metav1.NewTime(started).Rfc3339Copy()
	if d := a.DistrustDeadline(p); !d.IsZero() {
		t := metav1.NewTime(d).Rfc3339Copy()
		st.Deadline = &t
	}
	return st
}

// mergeRefs is a followed by the refs of b that a does not hold.
func mergeRefs(a, b []certapiv1alpha1.CertificateAuthorityRef) []certapiv1alpha1.CertificateAuthorityRef {
	out := slices.Clone(a)
	for _, r := range b {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// summaryOrNil is s, or nil when it counts nothing.
func summaryOrNil(s certapiv1alpha1.SecretsSummary) *certapiv1alpha1.SecretsSummary {
	if s.Count == 0 {
		return nil
	}
	return &s
}

// endpointsOrNil is s, or nil when it counts nothing.
func endpointsOrNil(s certapiv1alpha1.EndpointsSummary) *certapiv1alpha1.EndpointsSummary {
	if s.Count == 0 {
		return nil
	}
	return &s
}
