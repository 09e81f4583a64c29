package rotation

import (
	"fmt"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	servedcheck "github.com/certapi/certapi/pkg/controller/servedcert"
	"github.com/certapi/certapi/pkg/servedcert"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

func TestDistrustStatus(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 123, time.UTC)
	mk := func() *signer.CA {
		return signertest.NewCA(t, now, 8760*time.Hour)
	}
	oldCA, newCA := mk(), mk()
	pol := signer.RotationPolicy{DistrustDwell: 5 * time.Second, DistrustDeadline: 15 * time.Minute}
	pending := signer.Authorities{Active: newCA, Distrust: "leak", SwitchedAt: now,
		Retiring: []signer.Retiring{{CA: oldCA, Distrusted: true, DistrustedAt: now}}}
	done := signer.Authorities{Active: newCA, Distrust: "leak", SwitchedAt: now}
	secrets := func(names ...string) certapiv1alpha1.SecretsSummary {
		return certapiv1alpha1.SecretsSummary{Count: int32(len(names)), Names: names}
	}
	endpoints := certapiv1alpha1.EndpointsSummary{Count: 1, Names: []string{"ValidatingWebhookConfiguration hook webhook v.example.com: 10.0.3.7:8443"}}
	progress := &DistrustProgress{Known: true, PendingSecrets: secrets("a/live-tls"), UnmanagedSecrets: secrets("a/foreign", "a/gone-tls"), PendingReplicas: 1,
		PendingEndpoints: endpoints}
	started := metav1.NewTime(now.Truncate(time.Second))
	deadline := metav1.NewTime(now.Add(15 * time.Minute).Truncate(time.Second))
	later := now.Add(time.Minute)
	completed := metav1.NewTime(later.Truncate(time.Second))
	oldRef := certapiv1alpha1.CertificateAuthorityRef{SerialNumber: signer.FormatSerialNumber(oldCA.Certificate.SerialNumber), SubjectKeyID: oldCA.SubjectKeyID()}
	pendingStatus := &certapiv1alpha1.DistrustStatus{Distrust: "leak", Distrusted: []certapiv1alpha1.CertificateAuthorityRef{oldRef},
		StartedAt: started, Deadline: &deadline, PendingSecrets: &progress.PendingSecrets, UnmanagedSecrets: &progress.UnmanagedSecrets,
		PendingReplicas: 1, PendingTargets: 3, PendingEndpoints: &endpoints}
	completedStatus := &certapiv1alpha1.DistrustStatus{Distrust: "leak", Distrusted: []certapiv1alpha1.CertificateAuthorityRef{oldRef},
		StartedAt: started, Deadline: &deadline, CompletedAt: &completed, Completion: certapiv1alpha1.DistrustCompletionReissued}
	afterDeadline := now.Add(20 * time.Minute)
	completedLate := metav1.NewTime(afterDeadline.Truncate(time.Second))
	otherDone := signer.Authorities{Active: newCA, Distrust: "another", SwitchedAt: now}

	cases := []struct {
		name string
		in   distrustInput
		want *certapiv1alpha1.DistrustStatus
	}{
		{name: "pending: which CA, until when, what it waits for and what not",
			in:   distrustInput{Before: pending, After: pending, Progress: progress, PendingTargets: 3, Policy: pol, Now: now},
			want: pendingStatus},
		{name: "pending, progress not known this time: what was known stays",
			in:   distrustInput{Previous: pendingStatus, Before: pending, After: pending, Progress: &DistrustProgress{}, PendingTargets: 3, Policy: pol, Now: now},
			want: pendingStatus},
		{name: "re-issued: complete, nothing left pending, the unmanaged Secrets still named",
			in: distrustInput{Previous: pendingStatus, Before: pending, After: done, Steps: []signer.RotationStep{signer.StepDropDistrusted},
				Progress: &DistrustProgress{Known: true, UnmanagedSecrets: progress.UnmanagedSecrets}, Policy: pol, Now: later},
			want: &certapiv1alpha1.DistrustStatus{Distrust: "leak", Distrusted: []certapiv1alpha1.CertificateAuthorityRef{oldRef},
				StartedAt: started, Deadline: &deadline, CompletedAt: &completed, Completion: certapiv1alpha1.DistrustCompletionReissued,
				UnmanagedSecrets: &progress.UnmanagedSecrets}},
		{name: "deadline: complete, what was left behind named",
			in: distrustInput{Previous: pendingStatus, Before: pending, After: done, Steps: []signer.RotationStep{signer.StepDistrustDeadline},
				Progress: progress, Policy: pol, Now: later},
			want: &certapiv1alpha1.DistrustStatus{Distrust: "leak", Distrusted: []certapiv1alpha1.CertificateAuthorityRef{oldRef},
				StartedAt: started, Deadline: &deadline, CompletedAt: &completed, Completion: certapiv1alpha1.DistrustCompletionDeadline,
				PendingSecrets: &progress.PendingSecrets, PendingReplicas: 1, UnmanagedSecrets: &progress.UnmanagedSecrets, PendingEndpoints: &endpoints}},
		{name: "completed before this status was ever written: described from the CAs before",
			in: distrustInput{Before: pending, After: done, Steps: []signer.RotationStep{signer.StepDropDistrusted},
				Progress: &DistrustProgress{Known: true}, Policy: pol, Now: later},
			want: &certapiv1alpha1.DistrustStatus{Distrust: "leak", Distrusted: []certapiv1alpha1.CertificateAuthorityRef{oldRef},
				StartedAt: started, Deadline: &deadline, CompletedAt: &completed, Completion: certapiv1alpha1.DistrustCompletionReissued}},
		{name: "nothing pending, no step, the last distrust complete: its status stays as it is",
			in:   distrustInput{Previous: completedStatus, Before: done, After: done, Policy: pol, Now: later.Add(time.Hour)},
			want: completedStatus},
		{name: "nothing pending, no step, the status still pending (the write that completed it was lost): complete now",
			in: distrustInput{Previous: pendingStatus, Before: done, After: done, Policy: pol, Now: later},
			want: &certapiv1alpha1.DistrustStatus{Distrust: "leak", Distrusted: []certapiv1alpha1.CertificateAuthorityRef{oldRef},
				StartedAt: started, Deadline: &deadline, CompletedAt: &completed, Completion: certapiv1alpha1.DistrustCompletionReissued,
				UnmanagedSecrets: &progress.UnmanagedSecrets}},
		{name: "nothing pending, no step, the status still pending past its deadline: complete by the deadline, what was pending left behind",
			in: distrustInput{Previous: pendingStatus, Before: done, After: done, Policy: pol, Now: afterDeadline},
			want: &certapiv1alpha1.DistrustStatus{Distrust: "leak", Distrusted: []certapiv1alpha1.CertificateAuthorityRef{oldRef},
				StartedAt: started, Deadline: &deadline, CompletedAt: &completedLate, Completion: certapiv1alpha1.DistrustCompletionDeadline,
				PendingSecrets: &progress.PendingSecrets, PendingReplicas: 1, UnmanagedSecrets: &progress.UnmanagedSecrets, PendingEndpoints: &endpoints}},
		{name: "nothing pending, a status of another distrust: it stays as it is",
			in:   distrustInput{Previous: pendingStatus, Before: otherDone, After: otherDone, Policy: pol, Now: later},
			want: pendingStatus},
		{name: "never distrusted: none", in: distrustInput{Before: signer.Authorities{Active: newCA}, After: signer.Authorities{Active: newCA}, Policy: pol, Now: now}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := distrustStatus(tc.in)
			if !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestDistrustStatusNamesEveryDistrustedCA: a distrust distrusts every CA older than the new one (Active,
// Next, Retiring); status.distrust.distrusted names them all from the start to the end, although they
// leave the bundle one step at a time.
func TestDistrustStatusNamesEveryDistrustedCA(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() *signer.CA {
		return signertest.NewCA(t, now, 8760*time.Hour)
	}
	pol := signer.RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 48 * time.Hour, DistrustDwell: 5 * time.Second, DistrustDeadline: 15 * time.Minute}
	active, next, retiring := mk(), mk(), mk()
	a := signer.Authorities{Active: active, Next: next, NextPublished: now, Retiring: []signer.Retiring{{CA: retiring.WithoutKey(), Until: now.Add(time.Hour)}}}
	all := []certapiv1alpha1.CertificateAuthorityRef{castatusRef(retiring), castatusRef(active), castatusRef(next)}

	distrusted, step, err := a.Plan(signer.RotationInput{Now: now, Distrust: "leak", NewCA: func() (*signer.CA, error) { return mk(), nil }}, pol)
	if err != nil || step != signer.StepDistrust {
		t.Fatalf("distrust: %s, %v", step, err)
	}
	var prev *certapiv1alpha1.DistrustStatus
	before, steps := a, []signer.RotationStep{step}
	for cur := distrusted; ; {
		st := distrustStatus(distrustInput{Previous: prev, Before: before, After: cur, Steps: steps, Progress: &DistrustProgress{Known: true}, Policy: pol, Now: now.Add(time.Minute)})
		if !apiequality.Semantic.DeepEqual(st.Distrusted, all) {
			t.Fatalf("after %v: status.distrust.distrusted %v; want every older CA %v", steps, st.Distrusted, all)
		}
		if st.CompletedAt != nil {
			break
		}
		next, s, err := cur.Plan(signer.RotationInput{Now: now.Add(time.Minute), Distrust: "leak", Reissued: true}, pol)
		if err != nil || s != signer.StepDropDistrusted {
			t.Fatalf("with everything re-issued: %s, %v; want a distrusted CA dropped", s, err)
		}
		prev, before, cur, steps = st, cur, next, []signer.RotationStep{s}
	}
}

func castatusRef(ca *signer.CA) certapiv1alpha1.CertificateAuthorityRef {
	return certapiv1alpha1.CertificateAuthorityRef{SerialNumber: signer.FormatSerialNumber(ca.Certificate.SerialNumber), SubjectKeyID: ca.SubjectKeyID()}
}

// TestDistrustWaitsForServedEndpoints: a distrust is done only when no served endpoint presents a
// certificate of a distrusted CA that its bundle still verifies; endpoints that fail already (expired,
// another name) are named nowhere and not waited for.
func TestDistrustWaitsForServedEndpoints(t *testing.T) {
	eps := []servedcheck.PresentedEndpoint{
		{Name: "APIService v1.example.com: 10.0.0.9:443", State: servedcert.Verified},
		{Name: "MutatingWebhookConfiguration m webhook m.example.com: 10.0.0.8:8443", State: servedcert.Expired},
		{Name: "ValidatingWebhookConfiguration v webhook v.example.com: 10.0.0.7:8443", State: servedcert.ExpiringSoon},
		{Name: "ValidatingWebhookConfiguration w webhook w.example.com: 10.0.0.6:8443", State: servedcert.NameMismatch},
	}
	got := stillVerified(eps)
	want := certapiv1alpha1.EndpointsSummary{Count: 2, Names: []string{"APIService v1.example.com: 10.0.0.9:443",
		"ValidatingWebhookConfiguration v webhook v.example.com: 10.0.0.7:8443"}}
	if !apiequality.Semantic.DeepEqual(got, want) {
		t.Errorf("stillVerified = %+v; want %+v", got, want)
	}
	for _, c := range []struct {
		name string
		p    DistrustProgress
		done bool
	}{
		{name: "nothing pending", p: DistrustProgress{Known: true}, done: true},
		{name: "an endpoint still presents a distrusted CA's certificate", p: DistrustProgress{Known: true, PendingEndpoints: got}},
		{name: "not known", p: DistrustProgress{}},
	} {
		if c.p.Done() != c.done {
			t.Errorf("%s: Done() = %t; want %t", c.name, c.p.Done(), c.done)
		}
	}
	many := make([]servedcheck.PresentedEndpoint, 25)
	for n := range many {
		many[n] = servedcheck.PresentedEndpoint{Name: fmt.Sprintf("APIService v%02d: 10.0.0.1:443", n), State: servedcert.Verified}
	}
	if s := stillVerified(many); s.Count != 25 || len(s.Names) != maxNames {
		t.Errorf("stillVerified of 25 endpoints counts %d and names %d; want 25 and %d", s.Count, len(s.Names), maxNames)
	}
}
