// Package castatus writes CertificateAuthority/default's status, the CA's public face, in step with the
// CAs the leader holds and with how far their bundle has reached.
package castatus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/signer"
)

// Sync writes obj's status from the leader's CAs, the injection summary, the distrust's status and the
// Recovered condition (see Recovered; nil removes it) and the further conditions the leader found
// (APIsServed), if it differs. signerName is the signer a pending request is asked of through a
// CertificateSigningRequest, empty when it is signed by hand (see PendingRequest).
func Sync(ctx context.Context, client versioned.Interface, obj *certapiv1alpha1.CertificateAuthority, auth signer.Authorities, signerName string,
	injection *certapiv1alpha1.InjectionSummary, distrust *certapiv1alpha1.DistrustStatus, recovered *metav1.Condition, conditions ...metav1.Condition) error {
	want := obj.DeepCopy()
	st := &want.Status
	st.CABundle = string(auth.Published())
	ref := RefOf(auth.Active)
	st.Active = &ref
	st.ObservedGeneration = obj.Generation
	st.Injection = injection
	st.Distrust = distrust
	st.Certificates = nil
	add := func(ca *signer.CA, role certapiv1alpha1.CertificateAuthorityRole, distrusted bool) {
		st.Certificates = append(st.Certificates, certapiv1alpha1.CertificateAuthorityCertificate{
			CertificateAuthorityRef: RefOf(ca), Role: role, Distrusted: distrusted,
			NotBefore: metav1.NewTime(ca.Certificate.NotBefore), NotAfter: metav1.NewTime(ca.Certificate.NotAfter),
		})
		metrics.CANotAfter.WithLabelValues(string(role)).Set(float64(ca.ChainNotAfter().Unix()))
	}
	add(auth.Active, certapiv1alpha1.CARoleActive, false)
	if auth.Next != nil {
		add(auth.Next, certapiv1alpha1.CARoleNext, false)
	} else {
		metrics.CANotAfter.DeleteLabelValues(string(certapiv1alpha1.CARoleNext))
	}
	for _, r := range auth.Retiring {
		add(r.CA, certapiv1alpha1.CARoleRetiring, r.Distrusted)
	}
	if len(auth.Retiring) == 0 {
		metrics.CANotAfter.DeleteLabelValues(string(certapiv1alpha1.CARoleRetiring))
	}

	active := auth.Active.Certificate
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: certapiv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Signing", ObservedGeneration: obj.Generation,
		Message: fmt.Sprintf("the Active CA %s signs; it expires %s", ref.SerialNumber, active.NotAfter.UTC().Format(time.RFC3339)),
	})
	meta.SetStatusCondition(&st.Conditions, notWaitingFor(rotating(auth, distrust, obj.Generation), injection))
	st.PendingRequest = PendingRequest(auth, signerName)
	metrics.CARequestPendingSince.Reset()
	if p := st.PendingRequest; p != nil {
		metrics.CARequestPendingSince.WithLabelValues(p.Reason).Set(float64(p.CreatedAt.Unix()))
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{
			Type: certapiv1alpha1.ConditionAwaitingSignature, Status: metav1.ConditionTrue, Reason: p.Reason, ObservedGeneration: obj.Generation,
			Message: fmt.Sprintf("%s; if nothing is imported, certapi cannot sign after %s, when the Active CA's chain expires",
				p.WaitingFor, p.ActiveNotAfter.UTC().Format(time.RFC3339)),
		})
	} else {
		meta.RemoveStatusCondition(&st.Conditions, certapiv1alpha1.ConditionAwaitingSignature)
	}
	if recovered != nil {
		c := *recovered
		c.ObservedGeneration = obj.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	} else {
		meta.RemoveStatusCondition(&st.Conditions, certapiv1alpha1.ConditionRecovered)
	}
	for _, c := range conditions {
		c.ObservedGeneration = obj.Generation
		meta.SetStatusCondition(&st.Conditions, c)
	}

	if apiequality.Semantic.DeepEqual(obj.Status, want.Status) {
		return nil
	}
	_, err := client.CertapiV1alpha1().CertificateAuthorities().UpdateStatus(ctx, want, metav1.UpdateOptions{FieldManager: certapiv1alpha1.FieldManager})
	if err != nil {
		return fmt.Errorf("writing CertificateAuthority/%s status: %w", certapiv1alpha1.CertificateAuthorityName, err)
	}
	return nil
}

// PendingRequest is status.pendingRequest for auth: its certificate request waiting for a signature,
// or nil when none waits. It holds the request (public) and never the key. With signerName set, the
// request is asked of that signer through the CertificateSigningRequest named for it (PendingCA.Name).
func PendingRequest(auth signer.Authorities, signerName string) *certapiv1alpha1.CertificateAuthorityPendingRequest {
	p := auth.Pending
	if p == nil || auth.Active == nil {
		return nil
	}
	var why string
	switch p.Reason {
	case signer.PendingSelfSigned:
		why = "to replace certapi's self-signed Active CA " + RefOf(auth.Active).SerialNumber
	case signer.PendingForceRotation:
		why = "for the rotation spec.forceRotation asked for"
	default:
		why = "for the rotation that began when a third of the Active CA's chain life was left"
	}
	out := &certapiv1alpha1.CertificateAuthorityPendingRequest{
		Request: string(p.RequestPEM), SubjectKeyID: p.SubjectKeyID(), CreatedAt: metav1.NewTime(p.CreatedAt), Reason: string(p.Reason),
		WaitingFor: fmt.Sprintf("the CA certificate request made at %s %s waits for the organisation's CA to sign it: "+
			"kubectl certapi ca request prints it, kubectl certapi ca import takes the signed certificate and its chain", p.CreatedAt.UTC().Format(time.RFC3339), why),
		ActiveNotAfter: metav1.NewTime(auth.Active.ChainNotAfter()),
	}
	if signerName != "" {
		name := p.Name()
		out.CertificateSigningRequest = name
		out.WaitingFor = fmt.Sprintf("the CA certificate request made at %s %s waits in CertificateSigningRequest %s for its approval "+
			"(kubectl certificate approve %s) and for signer %s to sign it; certapi imports the certificate the signer issues",
			p.CreatedAt.UTC().Format(time.RFC3339), why, name, name, signerName)
	}
	return out
}

// maxSkippedNamed bounds the certificates not kept that a Recovered condition names.
const maxSkippedNamed = 3

// Recovered is the Recovered condition of a CA record created with none stored after certapi had
// published CAs (rec, see issuer.Recovery), or nil when rec is nil: when, which CAs stay trusted as
// Retiring and until when, which certificates were not kept and why, and what an admin does next. The
// message is also the Warning Event's.
func Recovered(rec *issuer.Recovery) *metav1.Condition {
	if rec == nil {
		return nil
	}
	c := &metav1.Condition{Type: certapiv1alpha1.ConditionRecovered, Status: metav1.ConditionTrue, Reason: certapiv1alpha1.RecoveredReasonKeptPublishedCAs}
	var b strings.Builder
	fmt.Fprintf(&b, "at %s certapi found no CA record in its etcd (its data was lost, and no snapshot was restored) and created a new CA", rec.At.UTC().Format(time.RFC3339))
	if len(rec.Kept) == 0 {
		c.Reason = certapiv1alpha1.RecoveredReasonNoPublishedCAKept
		b.WriteString("; no CA found in the bundles certapi had published could be kept, so certificates of the lost CA are no longer trusted")
	} else {
		var kept []string
		for _, k := range rec.Kept {
			kept = append(kept, fmt.Sprintf("%s until %s", k.SerialNumber, k.Until.UTC().Format(time.RFC3339)))
		}
		fmt.Fprintf(&b, "; it keeps %s found in %s in the bundle as Retiring (%s), so that the certificates they signed stay trusted until they expire",
			plural(len(rec.Kept), "the CA", "the CAs"), strings.Join(sources(rec.Kept), " and "), strings.Join(kept, ", "))
	}
	if len(rec.Skipped) > 0 {
		var skipped []string
		for _, s := range rec.Skipped[:min(len(rec.Skipped), maxSkippedNamed)] {
			name := s.SerialNumber
			if name == "" {
				name = "a block"
			}
			skipped = append(skipped, fmt.Sprintf("%s in %s: %s", name, strings.Join(s.Sources, " and "), s.Reason))
		}
		if more := len(rec.Skipped) - maxSkippedNamed; more > 0 {
			skipped = append(skipped, fmt.Sprintf("and %d more", more))
		}
		fmt.Fprintf(&b, "; not kept: %s", strings.Join(skipped, "; "))
	}
	b.WriteString(". ServingCertRequests were lost with the record: apply them again, and each adopts its Secret and re-issues it from the new CA")
	c.Message = b.String()
	return c
}

// sources lists the objects the CAs were found in, each once, in order of appearance.
func sources(cas []issuer.RecoveredCA) []string {
	var out []string
	for _, ca := range cas {
		for _, s := range ca.Sources {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// plural is one when n is 1, many otherwise.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// rotating says where a rotation stands, in words an admin can act on.
func rotating(auth signer.Authorities, distrust *certapiv1alpha1.DistrustStatus, generation int64) metav1.Condition {
	c := metav1.Condition{Type: certapiv1alpha1.ConditionRotating, Status: metav1.ConditionFalse, Reason: certapiv1alpha1.RotatingReasonIdle, ObservedGeneration: generation, Message: "no rotation is running"}
	switch {
	case auth.Next != nil:
		c.Status, c.Reason = metav1.ConditionTrue, certapiv1alpha1.RotatingReasonNextPublished
		c.Message = fmt.Sprintf("the Next CA %s was published %s; it signs once every target holds it and the grace period has passed",
			RefOf(auth.Next).SerialNumber, auth.NextPublished.UTC().Format(time.RFC3339))
	case len(auth.Retiring) > 0:
		c.Status, c.Reason = metav1.ConditionTrue, certapiv1alpha1.RotatingReasonRetiring
		r := auth.Retiring[0]
		var distrusted []string
		for _, r := range auth.Retiring {
			if r.Distrusted {
				distrusted = append(distrusted, RefOf(r.CA).SerialNumber)
			}
		}
		if len(distrusted) > 0 {
			c.Reason = certapiv1alpha1.RotatingReasonDistrusted
			c.Message = distrustMessage(distrusted, distrust)
		} else {
			c.Message = fmt.Sprintf("the Retiring CA %s leaves the bundle at %s, when no certificate it signed can still be valid", RefOf(r.CA).SerialNumber, r.Until.UTC().Format(time.RFC3339))
		}
		if auth.ForcedSwitch && c.Reason != certapiv1alpha1.RotatingReasonDistrusted { // a distrust switches at once by design
			c.Message += fmt.Sprintf("; the switch at %s was FORCED before every target held the new CA", auth.SwitchedAt.UTC().Format(time.RFC3339))
		}
	}
	return c
}

// notWaitingFor adds to a Rotating condition whose Next CA waits for the injection targets the ones it
// does not wait for because kube-apiserver refused them the bundle for good (a ConfigMap too large to
// take it, a write an admission policy forbids): the switch comes at the grace period, not at the
// forced-switch deadline months later, and an admin should know which objects lack the new CA.
func notWaitingFor(c metav1.Condition, inj *certapiv1alpha1.InjectionSummary) metav1.Condition {
	if c.Reason != certapiv1alpha1.RotatingReasonNextPublished || inj == nil || inj.Failed == 0 {
		return c
	}
	names := strings.Join(inj.FailedTargets, ", ")
	if more := int(inj.Failed) - len(inj.FailedTargets); more > 0 {
		names += fmt.Sprintf(" and %d more", more)
	}
	c.Message += fmt.Sprintf("; it does not wait for %s whose write kube-apiserver refused (%s): they will not trust the Next CA, see status.injection and their Events",
		count(inj.Failed, "injection target"), names)
	return c
}

// distrustMessage says what a pending distrust of the CAs with serials (every CA older than the Active
// one) waits for and what it does not.
func distrustMessage(serials []string, d *certapiv1alpha1.DistrustStatus) string {
	what := "the distrusted CA " + serials[0] + " leaves"
	if len(serials) > 1 {
		what = "the distrusted CAs " + strings.Join(serials, ", ") + " leave"
	}
	msg := fmt.Sprintf("%s the bundle once every Secret certapi delivers for an existing request, every certapi replica, "+
		"and every served endpoint that presented one of its certificates, holds a certificate of the Active CA", what)
	if d == nil {
		return msg
	}
	if d.Deadline != nil {
		msg += fmt.Sprintf(", or at %s (the distrust deadline) regardless", d.Deadline.UTC().Format(time.RFC3339))
	}
	var waits []string
	if s := d.PendingSecrets; s != nil && s.Count > 0 {
		waits = append(waits, fmt.Sprintf("%s not re-issued yet (%s)", count(s.Count, "Secret"), strings.Join(s.Names, ", ")))
	}
	if d.PendingReplicas > 0 {
		waits = append(waits, fmt.Sprintf("%s not serving from the Active CA yet", count(d.PendingReplicas, "certapi replica")))
	}
	if e := d.PendingEndpoints; e != nil && e.Count > 0 {
		waits = append(waits, fmt.Sprintf("%s still presenting a certificate of a distrusted CA (%s)", count(e.Count, "served endpoint"), strings.Join(e.Names, ", ")))
	}
	if len(waits) > 0 {
		msg += "; waiting for " + strings.Join(waits, " and ")
	}
	if s := d.UnmanagedSecrets; s != nil && s.Count > 0 {
		msg += fmt.Sprintf("; not waiting for %s certapi does not re-issue (%s)", count(s.Count, "labelled Secret"), strings.Join(s.Names, ", "))
	}
	if d.PendingTargets > 0 {
		msg += fmt.Sprintf("; %s not holding the current bundle yet", count(d.PendingTargets, "injection target"))
	}
	return msg + "; see status.distrust"
}

// count says "1 thing" or "n things".
func count(n int32, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// RefOf identifies ca as status does: its serial and subject key id.
func RefOf(ca *signer.CA) certapiv1alpha1.CertificateAuthorityRef {
	return certapiv1alpha1.CertificateAuthorityRef{SerialNumber: signer.FormatSerialNumber(ca.Certificate.SerialNumber), SubjectKeyID: ca.SubjectKeyID()}
}
