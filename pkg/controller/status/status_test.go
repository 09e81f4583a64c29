package status

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

var (
	testKey = types.NamespacedName{Namespace: "ns", Name: "r"}
	testNow = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
)

func testIssued(serial string) *Issued {
	return &Issued{Certificate: "CERT" + serial, CABundle: "BUNDLE", SerialNumber: serial, NotBefore: testNow,
		NotAfter: testNow.Add(time.Hour), RenewalTime: testNow.Add(40 * time.Minute), IssuedAt: testNow}
}

// TestApplyPending: a change is reported (and so written) only when it changes the status, and the
// status then holds the issued certificate, the bundle and Ready=True.
func TestApplyPending(t *testing.T) {
	stored := &certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: testKey.Namespace, Name: testKey.Name, Generation: 1, ResourceVersion: "5"}}
	issuedStored := stored.DeepCopy()
	applyPending(issuedStored, &pending{issued: testIssued("01")})
	for _, tc := range []struct {
		name        string
		stored      *certapiv1alpha1.ServingCertRequest
		change      *pending
		wantChanged bool
	}{
		{name: "issued", stored: stored, change: &pending{issued: testIssued("01")}, wantChanged: true},
		{name: "the same certificate again", stored: issuedStored, change: &pending{issued: testIssued("01")}, wantChanged: false},
		{name: "a new bundle", stored: issuedStored, change: &pending{bundle: ptr("NEW")}, wantChanged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.stored.DeepCopy()
			if changed := applyPending(got, tc.change); changed != tc.wantChanged {
				t.Errorf("applyPending reported a change: %v; want %v", changed, tc.wantChanged)
			}
			st := got.Status
			if st.Certificate != "CERT01" || st.SerialNumber != "01" || st.NotAfter == nil || !st.NotAfter.Time.Equal(testNow.Add(time.Hour)) ||
				st.RenewalTime == nil || !st.RenewalTime.Time.Equal(testNow.Add(40*time.Minute)) || st.ObservedGeneration != 1 {
				t.Errorf("status %+v does not hold the issued certificate", st)
			}
			if want := "BUNDLE"; tc.change.bundle != nil {
				want = *tc.change.bundle
				if st.CABundle != want {
					t.Errorf("caBundle %q; want %q", st.CABundle, want)
				}
			}
			if !meta.IsStatusConditionTrue(st.Conditions, certapiv1alpha1.ConditionReady) {
				t.Errorf("conditions %+v; want Ready=True", st.Conditions)
			}
		})
	}
}

// recordingUpdater keeps one request in memory and records every write; fail makes the next writes fail.
type recordingUpdater struct {
	mu     sync.Mutex
	obj    certapiv1alpha1.ServingCertRequest
	writes []certapiv1alpha1.ServingCertRequestStatus
	fail   int
}

func (u *recordingUpdater) UpdateStatus(_ context.Context, _ types.NamespacedName, mutate func(*certapiv1alpha1.ServingCertRequest) bool) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.fail > 0 {
		u.fail--
		return errors.New("kube-apiserver is away")
	}
	obj := u.obj.DeepCopy()
	if !mutate(obj) {
		return nil
	}
	u.obj = *obj
	u.writes = append(u.writes, *obj.Status.DeepCopy())
	return nil
}

func (u *recordingUpdater) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.writes)
}

func (u *recordingUpdater) last() certapiv1alpha1.ServingCertRequestStatus {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.writes[len(u.writes)-1]
}

// waitWrites waits until u has made n writes.
func waitWrites(t *testing.T, u *recordingUpdater, n int) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return u.count() >= n, nil
	}); err != nil {
		t.Fatalf("%d writes; want %d", u.count(), n)
	}
}

// pendingEntries is how many requests the Writer keeps an entry for.
func (w *Writer) pendingEntries() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

func ptr[T any](v T) *T { return &v }

// TestWriterWritesAtOnceThenCoalesces: a request's first change is written at once, not after the
// interval; the changes that follow within the interval wait for its end and go in one write, the last
// of each kind winning; once an interval passes with nothing to write, the request's entry is gone and
// its next change is written at once again.
func TestWriterWritesAtOnceThenCoalesces(t *testing.T) {
	clk := clocktesting.NewFakeClock(testNow)
	u := &recordingUpdater{obj: certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: testKey.Namespace, Name: testKey.Name, Generation: 1}}}
	const interval = time.Second
	w := newWriter(u, interval, 1, clk)
	ctx, cancel := context.WithCancel(context.Background())
	var done sync.WaitGroup
	done.Go(func() { _ = w.Run(ctx) })
	defer func() { cancel(); done.Wait() }()

	w.RecordIssued(testKey, *testIssued("01"))
	waitWrites(t, u, 1) // the clock has not moved: written at once
	if got := u.last().SerialNumber; got != "01" {
		t.Fatalf("first write has serial %q; want 01", got)
	}

	w.RecordIssued(testKey, *testIssued("02"))
	w.SetReady(testKey, Ready{Status: metav1.ConditionFalse, Reason: ReasonPending, Message: "first", Generation: 1})
	w.SetReady(testKey, Ready{Status: metav1.ConditionTrue, Reason: ReasonIssued, Message: "second", Generation: 1})
	// Within the interval nothing more is written; the queue waits on the clock. Step it a little at a
	// time: the write must come once the interval has passed, and not before. The queue schedules that
	// look when the first write's sync returns, which the test cannot see: if the test stepped first, the
	// look comes a step or two late on the fake clock, never early.
	const tick = 100 * time.Millisecond
	for stepped := tick; u.count() < 2; stepped += tick {
		clk.Step(tick)
		if stepped < interval {
			if n := u.count(); n != 1 {
				t.Fatalf("%d writes %s after the first; want 1 until the interval (%s) has passed", n, stepped, interval)
			}
			continue
		}
		if stepped > 3*interval {
			t.Fatalf("%d writes %s after the first; want the coalesced write once the interval (%s) has passed", u.count(), stepped, interval)
		}
		_ = wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 500*time.Millisecond, true, func(context.Context) (bool, error) {
			return u.count() >= 2, nil
		})
	}
	st := u.last()
	if st.SerialNumber != "02" {
		t.Errorf("coalesced write has serial %q; want the later certificate, 02", st.SerialNumber)
	}
	if c := meta.FindStatusCondition(st.Conditions, certapiv1alpha1.ConditionReady); c == nil || c.Message != "second" {
		t.Errorf("coalesced write has Ready %+v; want the last one set (message %q)", c, "second")
	}

	// An interval with nothing to write drops the entry.
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		clk.Step(interval)
		return w.pendingEntries() == 0, nil
	}); err != nil {
		t.Fatalf("%d entries kept after a quiet interval; want none", w.pendingEntries())
	}
	w.SetReady(testKey, Ready{Status: metav1.ConditionTrue, Reason: ReasonIssued, Message: "third", Generation: 1})
	waitWrites(t, u, 3) // at once again
	if n := u.count(); n != 3 {
		t.Errorf("%d writes; want 3", n)
	}
}

// TestWriterRetriesAFailedWrite: a write that fails is tried again with the change it carried.
func TestWriterRetriesAFailedWrite(t *testing.T) {
	u := &recordingUpdater{obj: certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: testKey.Namespace, Name: testKey.Name, Generation: 1}}, fail: 2}
	w := New(u, time.Millisecond, 1)
	ctx, cancel := context.WithCancel(context.Background())
	var done sync.WaitGroup
	done.Go(func() { _ = w.Run(ctx) })
	defer func() { cancel(); done.Wait() }()
	w.RecordIssued(testKey, *testIssued("01"))
	waitWrites(t, u, 1)
	if got := u.last().SerialNumber; got != "01" {
		t.Errorf("written serial %q after two failures; want 01", got)
	}
}

// TestWriterDoesNotRewriteItsLastCondition: the Ready condition the Writer has just written, set again
// within the interval and nothing else with it, makes no second write; a different condition, or the
// same one with a certificate, does.
func TestWriterDoesNotRewriteItsLastCondition(t *testing.T) {
	ready := Ready{Status: metav1.ConditionTrue, Reason: ReasonIssued, Message: "Secret holds certificate 01", Generation: 1}
	other := Ready{Status: metav1.ConditionFalse, Reason: ReasonPending, Message: "pending", Generation: 1}
	for _, tc := range []struct {
		name string
		// then is what is set within the interval after ready was written.
		then       func(w *Writer)
		wantWrites int
		// wantStored is the Ready condition stored in the end.
		wantStored Ready
	}{
		{name: "the same condition", then: func(w *Writer) { w.SetReady(testKey, ready) }, wantWrites: 1, wantStored: ready},
		{name: "the same condition twice", then: func(w *Writer) { w.SetReady(testKey, ready); w.SetReady(testKey, ready) }, wantWrites: 1, wantStored: ready},
		{name: "another condition", then: func(w *Writer) { w.SetReady(testKey, other) }, wantWrites: 2, wantStored: other},
		{name: "another condition, then the same again", then: func(w *Writer) { w.SetReady(testKey, other); w.SetReady(testKey, ready) }, wantWrites: 1, wantStored: ready},
		{name: "the same condition with a certificate", then: func(w *Writer) { w.RecordIssued(testKey, *testIssued("02")); w.SetReady(testKey, ready) }, wantWrites: 2, wantStored: ready},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(testNow)
			u := &recordingUpdater{obj: certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: testKey.Namespace, Name: testKey.Name, Generation: 1}}}
			const interval = time.Second
			w := newWriter(u, interval, 1, clk)
			ctx, cancel := context.WithCancel(context.Background())
			var done sync.WaitGroup
			done.Go(func() { _ = w.Run(ctx) })
			defer func() { cancel(); done.Wait() }()

			w.SetReady(testKey, ready)
			waitWrites(t, u, 1)
			tc.then(w)
			// Step the clock until the entry is gone: every look that was due has been made.
			if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				clk.Step(interval)
				return w.pendingEntries() == 0, nil
			}); err != nil {
				t.Fatalf("%d entries kept; want none once every look was made", w.pendingEntries())
			}
			if n := u.count(); n != tc.wantWrites {
				t.Errorf("%d writes; want %d", n, tc.wantWrites)
			}
			if c := meta.FindStatusCondition(u.last().Conditions, certapiv1alpha1.ConditionReady); c == nil || c.Message != tc.wantStored.Message || c.Status != tc.wantStored.Status {
				t.Errorf("stored Ready %+v; want the one set last (%s, %q)", c, tc.wantStored.Status, tc.wantStored.Message)
			}
		})
	}
}
