package castatus

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// TestRotatingSaysWhatADistrustWaitsFor: two minutes after a distrust, the Rotating condition alone tells
// an admin why the distrusted CA is still in the bundle and when it leaves regardless.
func TestRotatingSaysWhatADistrustWaitsFor(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() *signer.CA {
		return signertest.NewCA(t, now, 8760*time.Hour)
	}
	oldCA := mk()
	auth := signer.Authorities{Active: mk(), Distrust: "leak", SwitchedAt: now, ForcedSwitch: true,
		Retiring: []signer.Retiring{{CA: oldCA, Distrusted: true, DistrustedAt: now}}}
	deadline := metav1.NewTime(now.Add(15 * time.Minute))
	d := &certapiv1alpha1.DistrustStatus{Distrust: "leak", Deadline: &deadline,
		PendingSecrets:   &certapiv1alpha1.SecretsSummary{Count: 2, Names: []string{"a/x-tls", "b/y-tls"}},
		UnmanagedSecrets: &certapiv1alpha1.SecretsSummary{Count: 1, Names: []string{"a/foreign"}},
		PendingReplicas:  1, PendingTargets: 3,
		PendingEndpoints: &certapiv1alpha1.EndpointsSummary{Count: 1, Names: []string{"APIService v1.example.com: 10.0.0.9:443"}}}
	c := rotating(auth, d, 2)
	if c.Status != metav1.ConditionTrue || c.Reason != certapiv1alpha1.RotatingReasonDistrusted {
		t.Fatalf("condition %+v; want True, Distrusted", c)
	}
	for _, want := range []string{signer.FormatSerialNumber(oldCA.Certificate.SerialNumber), "2030-01-01T00:15:00Z", "2 Secrets not re-issued yet (a/x-tls, b/y-tls)",
		"1 certapi replica not serving", "1 served endpoint still presenting a certificate of a distrusted CA (APIService v1.example.com: 10.0.0.9:443)", "not waiting for 1 labelled Secret certapi does not re-issue (a/foreign)", "3 injection targets", "status.distrust"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("message %q does not say %q", c.Message, want)
		}
	}
	if strings.Contains(c.Message, "FORCED") {
		t.Errorf("message %q calls a distrust's switch forced", c.Message)
	}
}

// TestRotatingNamesFailedTargets: while the Next CA waits, the Rotating condition names the targets it
// does not wait for because their write was refused for good, and says nothing of them otherwise.
func TestRotatingNamesFailedTargets(t *testing.T) {
	published := metav1.Condition{Type: certapiv1alpha1.ConditionRotating, Status: metav1.ConditionTrue, Reason: certapiv1alpha1.RotatingReasonNextPublished, Message: "the Next CA 01 was published"}
	idle := metav1.Condition{Type: certapiv1alpha1.ConditionRotating, Status: metav1.ConditionFalse, Reason: certapiv1alpha1.RotatingReasonIdle, Message: "no rotation is running"}
	failed := &certapiv1alpha1.InjectionSummary{Targets: 14, UpToDate: 2, Failed: 12, FailedTargets: []string{"ConfigMap a/big", "ConfigMap b/big"}}
	for _, tc := range []struct {
		name string
		c    metav1.Condition
		inj  *certapiv1alpha1.InjectionSummary
		want []string
		same bool
	}{
		{name: "Next published, failed targets", c: published, inj: failed,
			want: []string{"the Next CA 01 was published; it does not wait for 12 injection targets", "ConfigMap a/big, ConfigMap b/big and 10 more", "status.injection"}},
		{name: "Next published, none failed", c: published, inj: &certapiv1alpha1.InjectionSummary{Targets: 2, UpToDate: 2}, same: true},
		{name: "no summary yet", c: published, same: true},
		{name: "idle", c: idle, inj: failed, same: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := notWaitingFor(tc.c, tc.inj)
			if tc.same && got != tc.c {
				t.Errorf("condition changed: %q", got.Message)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Message, w) {
					t.Errorf("message %q does not say %q", got.Message, w)
				}
			}
		})
	}
}

// TestRotatingNamesEveryDistrustedCA: a distrust distrusts every CA older than the new one, and the
// Rotating condition names them all.
func TestRotatingNamesEveryDistrustedCA(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() *signer.CA {
		return signertest.NewCA(t, now, 8760*time.Hour)
	}
	a, b, c := mk(), mk(), mk()
	auth := signer.Authorities{Active: mk(), Distrust: "leak", SwitchedAt: now, ForcedSwitch: true,
		Retiring: []signer.Retiring{{CA: a, Distrusted: true, DistrustedAt: now}, {CA: b, Distrusted: true, DistrustedAt: now}, {CA: c, Distrusted: true, DistrustedAt: now}}}
	cond := rotating(auth, nil, 1)
	want := "the distrusted CAs " + RefOf(a).SerialNumber + ", " + RefOf(b).SerialNumber + ", " + RefOf(c).SerialNumber + " leave the bundle"
	if cond.Reason != certapiv1alpha1.RotatingReasonDistrusted || !strings.Contains(cond.Message, want) {
		t.Errorf("condition %s: %q; want Distrusted, saying %q", cond.Reason, cond.Message, want)
	}
}

// TestRecovered: the Recovered condition of a CA record created with none stored says when, which CAs
// stay trusted and until when, what was not kept and why, and what to do next; none without a Recovery.
func TestRecovered(t *testing.T) {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	until := at.Add(2160 * time.Hour)
	const api, ctb = "APIService v1alpha1.certapi.dev", "ClusterTrustBundle certapi.dev:serving:ca"
	for _, tc := range []struct {
		name   string
		rec    *issuer.Recovery
		reason string
		want   []string
		not    []string
	}{
		{name: "no recovery: no condition"},
		{name: "one CA kept from both sources",
			rec:    &issuer.Recovery{At: at, Kept: []issuer.RecoveredCA{{SerialNumber: "1a", Sources: []string{api, ctb}, Until: until}}},
			reason: certapiv1alpha1.RecoveredReasonKeptPublishedCAs,
			want: []string{"at 2030-01-01T00:00:00Z certapi found no CA record", "keeps the CA found in " + api + " and " + ctb,
				"1a until 2030-04-01T00:00:00Z", "apply them again", "adopts its Secret"},
			not: []string{"not kept"}},
		{name: "two kept, some skipped",
			rec: &issuer.Recovery{At: at,
				Kept: []issuer.RecoveredCA{{SerialNumber: "1a", Sources: []string{api}, Until: until}, {SerialNumber: "2b", Sources: []string{ctb}, Until: until}},
				Skipped: []issuer.RecoveredCA{{SerialNumber: "3c", Sources: []string{api}, Reason: "expired at 2029-01-01T00:00:00Z"},
					{Sources: []string{ctb}, Reason: "certificate 2 does not parse"}, {SerialNumber: "4d", Sources: []string{api}, Reason: "x"}, {SerialNumber: "5e", Sources: []string{api}, Reason: "y"}}},
			reason: certapiv1alpha1.RecoveredReasonKeptPublishedCAs,
			want: []string{"keeps the CAs found in " + api + " and " + ctb, "1a until", "2b until", "not kept: 3c in " + api + ": expired at 2029-01-01T00:00:00Z",
				"a block in " + ctb + ": certificate 2 does not parse", "and 1 more"},
			not: []string{"5e"}},
		{name: "none kept",
			rec:    &issuer.Recovery{At: at, Skipped: []issuer.RecoveredCA{{SerialNumber: "3c", Sources: []string{api}, Reason: "expired"}}},
			reason: certapiv1alpha1.RecoveredReasonNoPublishedCAKept,
			want:   []string{"no CA found in the bundles certapi had published could be kept", "no longer trusted", "not kept: 3c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Recovered(tc.rec)
			if tc.rec == nil {
				if c != nil {
					t.Fatalf("condition %+v; want none", c)
				}
				return
			}
			if c == nil || c.Type != certapiv1alpha1.ConditionRecovered || c.Status != metav1.ConditionTrue || c.Reason != tc.reason {
				t.Fatalf("condition %+v; want Recovered True %s", c, tc.reason)
			}
			for _, w := range tc.want {
				if !strings.Contains(c.Message, w) {
					t.Errorf("message %q does not say %q", c.Message, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(c.Message, n) {
					t.Errorf("message %q says %q", c.Message, n)
				}
			}
		})
	}
}

// TestSyncWritesFurtherConditions: the conditions the leader adds (APIsServed) are written beside Ready and
// Rotating, at the object's generation, and replace what an earlier term wrote.
func TestSyncWritesFurtherConditions(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	auth := signer.Authorities{Active: signertest.NewCA(t, now, 8760*time.Hour)}
	obj := &certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: certapiv1alpha1.CertificateAuthorityName, Generation: 3}}
	obj.Status.Conditions = []metav1.Condition{{Type: certapiv1alpha1.ConditionAPIsServed, Status: metav1.ConditionTrue,
		Reason: certapiv1alpha1.APIsServedReasonAllServed, Message: "kube-apiserver v1.37.2 serves every API certapi uses"}}
	client := fake.NewSimpleClientset(obj)
	notServed := metav1.Condition{Type: certapiv1alpha1.ConditionAPIsServed, Status: metav1.ConditionFalse,
		Reason: certapiv1alpha1.APIsServedReasonNotServed, Message: "kube-apiserver v1.33.7 serves no certificates.k8s.io/v1 podcertificaterequests"}
	if err := Sync(context.Background(), client, obj, auth, "", nil, nil, nil, notServed); err != nil {
		t.Fatal(err)
	}
	got, err := client.CertapiV1alpha1().CertificateAuthorities().Get(context.Background(), obj.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{certapiv1alpha1.ConditionReady, certapiv1alpha1.ConditionRotating, certapiv1alpha1.ConditionAPIsServed} {
		if meta.FindStatusCondition(got.Status.Conditions, want) == nil {
			t.Errorf("no %s condition in %+v", want, got.Status.Conditions)
		}
	}
	c := meta.FindStatusCondition(got.Status.Conditions, certapiv1alpha1.ConditionAPIsServed)
	if c == nil || c.Status != metav1.ConditionFalse || c.Message != notServed.Message || c.ObservedGeneration != 3 {
		t.Errorf("APIsServed %+v; want False with %q at generation 3", c, notServed.Message)
	}
}
