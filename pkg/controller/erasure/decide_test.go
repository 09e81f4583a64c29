package erasure

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/snapshot"
)

var (
	t0        = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	completed = metav1.NewTime(t0)
)

func erasedAt(reason string, at time.Time) []metav1.Condition {
	status := metav1.ConditionFalse
	if reason == certapiv1alpha1.HistoryErasedReasonErased {
		status = metav1.ConditionTrue
	}
	return []metav1.Condition{{Type: certapiv1alpha1.ConditionHistoryErased, Status: status, Reason: reason, LastTransitionTime: metav1.NewTime(at)}}
}

func TestDue(t *testing.T) {
	done := &certapiv1alpha1.DistrustStatus{Distrust: "leak", CompletedAt: &completed}
	for _, tc := range []struct {
		name string
		st   certapiv1alpha1.CertificateAuthorityStatus
		want bool
	}{
		{"no distrust ever", certapiv1alpha1.CertificateAuthorityStatus{}, false},
		{"a distrust pending", certapiv1alpha1.CertificateAuthorityStatus{Distrust: &certapiv1alpha1.DistrustStatus{Distrust: "leak"}}, false},
		{"a distrust pending, the last one erased",
			certapiv1alpha1.CertificateAuthorityStatus{Distrust: &certapiv1alpha1.DistrustStatus{Distrust: "again"},
				Conditions: erasedAt(certapiv1alpha1.HistoryErasedReasonErased, t0.Add(-time.Hour))}, false},
		{"completed, never erased (the leader died before it could)", certapiv1alpha1.CertificateAuthorityStatus{Distrust: done}, true},
		{"completed and erased", certapiv1alpha1.CertificateAuthorityStatus{Distrust: done,
			Conditions: erasedAt(certapiv1alpha1.HistoryErasedReasonErased, t0.Add(time.Second))}, false},
		{"completed and erased in the same second", certapiv1alpha1.CertificateAuthorityStatus{Distrust: done,
			Conditions: erasedAt(certapiv1alpha1.HistoryErasedReasonErased, t0)}, false},
		{"completed, left to the operator of an external etcd", certapiv1alpha1.CertificateAuthorityStatus{Distrust: done,
			Conditions: erasedAt(certapiv1alpha1.HistoryErasedReasonExternalEtcd, t0.Add(time.Second))}, false},
		{"completed, the erasure failed: tried again", certapiv1alpha1.CertificateAuthorityStatus{Distrust: done,
			Conditions: erasedAt(certapiv1alpha1.HistoryErasedReasonFailed, t0.Add(time.Second))}, true},
		{"a second distrust completed after the first one's erasure", certapiv1alpha1.CertificateAuthorityStatus{Distrust: done,
			Conditions: erasedAt(certapiv1alpha1.HistoryErasedReasonErased, t0.Add(-time.Second))}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := due(tc.st); got != tc.want {
				t.Errorf("due = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCondition(t *testing.T) {
	d := &certapiv1alpha1.DistrustStatus{Distrust: "leak", CompletedAt: &completed}
	for _, tc := range []struct {
		name       string
		out        Outcome
		err        error
		now        time.Time
		wantStatus metav1.ConditionStatus
		wantReason string
		wantAt     time.Time
		wantIn     []string
	}{
		{"erased with snapshots", Outcome{Revision: 42, Defragmented: []string{"unix:///d/etcd.sock"}, Snapshot: "/d/snapshots/certapi-x.db", Removed: []string{"a", "b"}},
			nil, t0.Add(3 * time.Second), metav1.ConditionTrue, certapiv1alpha1.HistoryErasedReasonErased, t0.Add(3 * time.Second),
			[]string{`"leak"`, "revision 42", "defragmented its member", "certapi-x.db", "removed 2 scheduled snapshots", "Backups copied elsewhere"}},
		{"erased, three members, no snapshots", Outcome{Revision: 7, Defragmented: []string{"a", "b", "c"}},
			nil, t0.Add(time.Second), metav1.ConditionTrue, certapiv1alpha1.HistoryErasedReasonErased, t0.Add(time.Second),
			[]string{"its 3 members (a, b, c)", "no scheduled snapshots"}},
		{"external etcd", Outcome{External: true, Revision: 99},
			nil, t0.Add(time.Second), metav1.ConditionFalse, certapiv1alpha1.HistoryErasedReasonExternalEtcd, t0.Add(time.Second),
			[]string{"does not own", "etcdctl compact 99 --physical", "etcdctl defrag --cluster"}},
		{"failed", Outcome{}, errors.New("defragmenting the etcd member at x: unavailable"),
			t0.Add(time.Second), metav1.ConditionFalse, certapiv1alpha1.HistoryErasedReasonFailed, t0.Add(time.Second),
			[]string{"tried again", "unavailable"}},
		{"a clock behind the one that completed the distrust", Outcome{Revision: 1, Defragmented: []string{"a"}},
			nil, t0.Add(-time.Minute), metav1.ConditionTrue, certapiv1alpha1.HistoryErasedReasonErased, t0, nil},
		{"sub-second times are dropped, as stored", Outcome{Revision: 1, Defragmented: []string{"a"}},
			nil, t0.Add(1500 * time.Millisecond), metav1.ConditionTrue, certapiv1alpha1.HistoryErasedReasonErased, t0.Add(time.Second), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := condition(d, tc.out, tc.err, 3, tc.now)
			if c.Type != certapiv1alpha1.ConditionHistoryErased || c.Status != tc.wantStatus || c.Reason != tc.wantReason ||
				!c.LastTransitionTime.Time.Equal(tc.wantAt) || c.ObservedGeneration != 3 {
				t.Errorf("condition = %+v, want %s %s at %s", c, tc.wantStatus, tc.wantReason, tc.wantAt)
			}
			for _, w := range tc.wantIn {
				if !strings.Contains(c.Message, w) {
					t.Errorf("message %q does not say %q", c.Message, w)
				}
			}
			// What it writes, due reads as settled, unless it failed.
			st := certapiv1alpha1.CertificateAuthorityStatus{Distrust: d, Conditions: []metav1.Condition{c}}
			if got, want := due(st), tc.err != nil; got != want {
				t.Errorf("due after writing it = %v, want %v", got, want)
			}
		})
	}
}

func TestDistrustedRecord(t *testing.T) {
	ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	serial, ski := signer.FormatSerialNumber(ca.Certificate.SerialNumber), ca.SubjectKeyID()
	sum := sha256.Sum256(ca.Certificate.Raw)
	fp := hex.EncodeToString(sum[:])
	started := metav1.NewTime(t0.Add(-time.Minute))
	ref := certapiv1alpha1.CertificateAuthorityRef{SerialNumber: serial, SubjectKeyID: ski}
	pending := certapiv1alpha1.CertificateAuthorityStatus{CABundle: string(ca.CertificatePEM()),
		Distrust: &certapiv1alpha1.DistrustStatus{Distrust: "leak", StartedAt: started, Distrusted: []certapiv1alpha1.CertificateAuthorityRef{ref}}}
	done := certapiv1alpha1.CertificateAuthorityStatus{
		Distrust: &certapiv1alpha1.DistrustStatus{Distrust: "leak", StartedAt: started, CompletedAt: &completed, Distrusted: []certapiv1alpha1.CertificateAuthorityRef{ref}}}
	completedAt := t0
	earlier := snapshot.DistrustedCA{SerialNumber: "aa", SubjectKeyID: "01", Distrust: "old", DistrustedAt: t0.Add(-time.Hour)}
	for _, tc := range []struct {
		name     string
		existing []snapshot.DistrustedCA
		st       certapiv1alpha1.CertificateAuthorityStatus
		want     []snapshot.DistrustedCA
		changed  bool
	}{
		{"no distrust", nil, certapiv1alpha1.CertificateAuthorityStatus{}, nil, false},
		{"pending: recorded at once, with the fingerprint from the bundle", nil, pending,
			[]snapshot.DistrustedCA{{SerialNumber: serial, SubjectKeyID: ski, SHA256Fingerprint: fp, Distrust: "leak", DistrustedAt: started.UTC()}}, true},
		{"pending again: nothing to write", []snapshot.DistrustedCA{{SerialNumber: serial, SubjectKeyID: ski, SHA256Fingerprint: fp, Distrust: "leak", DistrustedAt: started.UTC()}}, pending,
			[]snapshot.DistrustedCA{{SerialNumber: serial, SubjectKeyID: ski, SHA256Fingerprint: fp, Distrust: "leak", DistrustedAt: started.UTC()}}, false},
		{"completed: completedAt added, the fingerprint kept", []snapshot.DistrustedCA{{SerialNumber: serial, SubjectKeyID: ski, SHA256Fingerprint: fp, Distrust: "leak", DistrustedAt: started.UTC()}}, done,
			[]snapshot.DistrustedCA{{SerialNumber: serial, SubjectKeyID: ski, SHA256Fingerprint: fp, Distrust: "leak", DistrustedAt: started.UTC(), CompletedAt: &completedAt}}, true},
		{"first seen completed (a new leader): serial and key ID only", []snapshot.DistrustedCA{earlier}, done,
			[]snapshot.DistrustedCA{earlier, {SerialNumber: serial, SubjectKeyID: ski, Distrust: "leak", DistrustedAt: started.UTC(), CompletedAt: &completedAt}}, true},
		{"earlier distrusts are kept", []snapshot.DistrustedCA{earlier}, pending,
			[]snapshot.DistrustedCA{earlier, {SerialNumber: serial, SubjectKeyID: ski, SHA256Fingerprint: fp, Distrust: "leak", DistrustedAt: started.UTC()}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, changed := distrustedRecord(tc.existing, tc.st)
			if changed != tc.changed || !reflect.DeepEqual(got, tc.want) {
				t.Errorf("distrustedRecord = %+v, %v; want %+v, %v", got, changed, tc.want, tc.changed)
			}
		})
	}
}
