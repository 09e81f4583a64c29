package signer

import (
	"errors"
	"regexp"
	"testing"
	"time"
)

// importedCA returns an intermediate CA under root, signed for a year from an hour before testNow.
func importedCA(tb testing.TB, root *testUpstream) *CA {
	tb.Helper()
	key := testKey(tb, "ECDSAP256")
	cert := root.signCSR(tb, intermediateCSR(tb, key), nil)
	ca, _ := mustImport(tb, cert, nil, key, ImportOptions{ClusterDomain: "cluster.local", Now: testNow, RootsPEM: bundleOf(root.cert)})
	return ca
}

func testRequest(tb testing.TB, now time.Time) func(PendingReason) (*PendingCA, error) {
	return func(reason PendingReason) (*PendingCA, error) {
		key := testKey(tb, "ECDSAP256")
		return &PendingCA{Key: key, RequestPEM: intermediateCSR(tb, key), CreatedAt: now, Reason: reason}, nil
	}
}

func TestPlanUpstream(t *testing.T) {
	root := newTestRoot(t, "Example Root", "P256", nil)
	inter := importedCA(t, root)
	selfSigned := newTestCA(t, testNow, 300*24*time.Hour)
	nb, end := inter.Certificate.NotBefore, inter.ChainNotAfter()
	life := end.Sub(nb)
	pending := &PendingCA{Key: testKey(t, "ECDSAP256"), CreatedAt: testNow, Reason: PendingRotation}
	pol := RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 90 * 24 * time.Hour}

	cases := []struct {
		name       string
		a          Authorities
		in         RotationInput
		want       RotationStep
		wantReason PendingReason
	}{
		{name: "self-signed Active under upstream: request at once", a: Authorities{Active: selfSigned},
			in: RotationInput{Now: testNow, Upstream: true}, want: StepRequestNext, wantReason: PendingSelfSigned},
		{name: "young intermediate: nothing", a: Authorities{Active: inter},
			in: RotationInput{Now: testNow, Upstream: true}, want: StepNone},
		{name: "one third of the chain's life left: request", a: Authorities{Active: inter},
			in: RotationInput{Now: end.Add(-life / 3), Upstream: true}, want: StepRequestNext, wantReason: PendingRotation},
		{name: "forceRotation: request", a: Authorities{Active: inter},
			in: RotationInput{Now: testNow, Upstream: true, ForceRotation: "r1"}, want: StepRequestNext, wantReason: PendingForceRotation},
		{name: "pending: waits, even past one sixth (no forced switch without a Next CA)", a: Authorities{Active: inter, Pending: pending},
			in: RotationInput{Now: end.Add(-life / 10), Upstream: true}, want: StepNone},
		{name: "pending and forceRotation: waits", a: Authorities{Active: inter, Pending: pending},
			in: RotationInput{Now: testNow, Upstream: true, ForceRotation: "r2"}, want: StepNone},
		{name: "pending without upstream: dropped", a: Authorities{Active: inter, Pending: pending},
			in: RotationInput{Now: testNow}, want: StepDropRequest},
		{name: "self-signed Active without upstream: nothing", a: Authorities{Active: selfSigned},
			in: RotationInput{Now: testNow}, want: StepNone},
		{name: "intermediate Active without upstream, due: a self-signed Next", a: Authorities{Active: inter},
			in: RotationInput{Now: end.Add(-life / 3)}, want: StepPublishNext},
		{name: "distrust under upstream: a self-signed CA signs at once, the request is dropped", a: Authorities{Active: inter, Pending: pending},
			in: RotationInput{Now: testNow, Upstream: true, Distrust: "leak"}, want: StepDistrust},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.NewCA = func() (*CA, error) {
				return NewCA(CAOptions{ClusterDomain: "cluster.local", Duration: 300 * 24 * time.Hour, Now: tc.in.Now})
			}
			tc.in.NewRequest = testRequest(t, tc.in.Now)
			got, step, err := tc.a.Plan(tc.in, pol)
			if err != nil {
				t.Fatal(err)
			}
			if step != tc.want {
				t.Fatalf("step %q, want %q", step, tc.want)
			}
			switch step {
			case StepRequestNext:
				if got.Pending == nil || got.Pending.Reason != tc.wantReason || got.Next != nil || got.Active != tc.a.Active {
					t.Fatalf("after %s: pending %+v, next %v", step, got.Pending, got.Next)
				}
			case StepDropRequest, StepDistrust:
				if got.Pending != nil {
					t.Fatalf("after %s the request is still pending", step)
				}
			case StepPublishNext:
				if !got.Next.SelfSigned() {
					t.Fatal("the Next CA is not self-signed")
				}
			}
		})
	}
}

// TestUpstreamRotationRunsThrough: a self-signed first CA requests its replacement, the import makes it
// Next, the gate switches to it; at a third of the chain's life the next request is made, imported,
// switched to.
func TestUpstreamRotationRunsThrough(t *testing.T) {
	root := newTestRoot(t, "Example Root", "P256", nil)
	now := testNow
	pol := RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 48 * time.Hour}
	first := newTestCA(t, now, 300*24*time.Hour)
	a := Authorities{Active: first}
	step := func(in RotationInput) RotationStep {
		t.Helper()
		in.Now, in.Upstream, in.NewRequest = now, true, testRequest(t, now)
		in.NewCA = func() (*CA, error) { t.Fatal("NewCA called under upstream"); return nil, nil }
		next, s, err := a.Plan(in, pol)
		if err != nil {
			t.Fatal(err)
		}
		a = next
		return s
	}
	importPending := func() {
		t.Helper()
		cert := root.signCSR(t, a.Pending.RequestPEM, nil)
		ca, _, err := CheckIntermediate(bundleOf(cert), nil, a.Pending.Key, ImportOptions{ClusterDomain: "cluster.local", Now: now, RootsPEM: bundleOf(root.cert)})
		if err != nil {
			t.Fatal(err)
		}
		if a, err = a.ImportNext(ca, now); err != nil {
			t.Fatal(err)
		}
	}
	if s := step(RotationInput{}); s != StepRequestNext {
		t.Fatalf("first step %q", s)
	}
	if s := step(RotationInput{NextEverywhere: true}); s != StepNone {
		t.Fatalf("with a pending request: step %q", s)
	}
	if _, err := a.ImportNext(first, now); err == nil {
		t.Fatal("ImportNext took a CA for another key")
	}
	importPending()
	if a.Next == nil || a.Pending != nil {
		t.Fatal("the import did not make the Next CA")
	}
	if _, err := a.ImportNext(a.Next, now); !errors.Is(err, ErrNoPendingRequest) {
		t.Fatalf("a second import: %v", err)
	}
	now = now.Add(2 * time.Hour)
	if s := step(RotationInput{NextEverywhere: true}); s != StepSwitch || a.Active.SelfSigned() {
		t.Fatalf("switch: step %q", s)
	}
	// The imported CA is valid until testNow+1y-1h (signCSR); its life is measured on its chain.
	end := a.Active.ChainNotAfter()
	life := end.Sub(a.Active.Certificate.NotBefore)
	now = end.Add(-life/3 + time.Minute)
	// The retiring bootstrap CA leaves first.
	for {
		s := step(RotationInput{NextEverywhere: true})
		if s == StepRetire {
			continue
		}
		if s != StepRequestNext || a.Pending.Reason != PendingRotation {
			t.Fatalf("at a third of the life: step %q", s)
		}
		break
	}
	waited, left := a.Waiting(now.Add(time.Hour))
	if waited != time.Hour || left != end.Sub(now.Add(time.Hour)) {
		t.Fatalf("Waiting: %s, %s", waited, left)
	}
	if due := a.NextDue(pol, now); !due.IsZero() {
		t.Fatalf("NextDue with a pending request and nothing else: %s", due)
	}
	importPending()
	now = now.Add(2 * time.Hour)
	if s := step(RotationInput{NextEverywhere: true}); s != StepSwitch {
		t.Fatalf("second switch: step %q", s)
	}
}

// TestPendingName: the name of a request in the Kubernetes API is the same for the same key (every
// leader finds its predecessor's), differs between keys, and is a valid object name.
func TestPendingName(t *testing.T) {
	key, err := GenerateKey(ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	other, err := GenerateKey(ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	a, b := (&PendingCA{Key: key}).Name(), (&PendingCA{Key: key}).Name()
	c := (&PendingCA{Key: other}).Name()
	if a != b || a == c {
		t.Fatalf("names %q, %q (same key) and %q (another); want the same key's equal and another's different", a, b, c)
	}
	if !regexp.MustCompile(`^certapi-ca-[0-9a-f]{16}$`).MatchString(a) {
		t.Fatalf("name %q; want certapi-ca- and 16 hex digits", a)
	}
}
