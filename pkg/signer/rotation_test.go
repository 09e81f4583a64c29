package signer

import (
	"errors"
	"testing"
	"time"
)

func TestRotationPlan(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	life := 300 * 24 * time.Hour
	newCA := func(now time.Time) func() (*CA, error) {
		return func() (*CA, error) {
			return NewCA(CAOptions{ClusterDomain: "cluster.local", Duration: life, Now: now})
		}
	}
	active, err := newCA(start)()
	if err != nil {
		t.Fatal(err)
	}
	// NotBefore is backdated; measure remaining life from the real notBefore/notAfter.
	nb, na := active.Certificate.NotBefore, active.Certificate.NotAfter
	realLife := na.Sub(nb)
	pol := RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 2160 * time.Hour}
	base := Authorities{Active: active}

	cases := []struct {
		name string
		a    Authorities
		in   RotationInput
		want RotationStep
	}{
		{name: "young CA: nothing", a: base, in: RotationInput{Now: start.Add(time.Hour)}, want: StepNone},
		{name: "one third left: publish Next", a: base, in: RotationInput{Now: na.Add(-realLife / 3)}, want: StepPublishNext},
		{name: "just above one third: nothing", a: base, in: RotationInput{Now: na.Add(-realLife/3 - time.Minute)}, want: StepNone},
		{name: "forceRotation changed: publish Next", a: base, in: RotationInput{Now: start, ForceRotation: "1"}, want: StepPublishNext},
		{name: "forceRotation already acted on: nothing", a: Authorities{Active: active, ForceRotation: "1"}, in: RotationInput{Now: start, ForceRotation: "1"}, want: StepNone},
		{name: "distrust: new Active at once", a: base, in: RotationInput{Now: start, Distrust: "leak"}, want: StepDistrust},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.NewCA = newCA(tc.in.Now)
			got, step, err := tc.a.Plan(tc.in, pol)
			if err != nil {
				t.Fatal(err)
			}
			if step != tc.want {
				t.Fatalf("step %q, want %q", step, tc.want)
			}
			if step == StepNone && got.Active != tc.a.Active {
				t.Fatal("StepNone changed the Active CA")
			}
		})
	}
}

// TestRotationRunsThrough drives a whole rotation with an injected clock: publish, wait for the gate
// (targets and grace), switch, retire at switch + max certificate duration.
func TestRotationRunsThrough(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() (*CA, error) {
		return NewCA(CAOptions{ClusterDomain: "cluster.local", Duration: 8760 * time.Hour, Now: now})
	}
	first, _ := mk()
	pol := RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 48 * time.Hour}
	a := Authorities{Active: first}
	step := func(in RotationInput) RotationStep {
		t.Helper()
		in.Now, in.NewCA = now, mk
		next, s, err := a.Plan(in, pol)
		if err != nil {
			t.Fatal(err)
		}
		a = next
		return s
	}
	if s := step(RotationInput{ForceRotation: "r1"}); s != StepPublishNext || a.Next == nil {
		t.Fatalf("step %q", s)
	}
	if len(a.Certificates()) != 2 {
		t.Fatal("bundle is not [Active, Next]")
	}
	if s := step(RotationInput{ForceRotation: "r1", NextEverywhere: true}); s != StepNone {
		t.Fatalf("switched before the grace period: %q", s)
	}
	now = now.Add(2 * time.Hour)
	if s := step(RotationInput{ForceRotation: "r1", NextEverywhere: false}); s != StepNone {
		t.Fatalf("switched before every target held Next: %q", s)
	}
	if s := step(RotationInput{ForceRotation: "r1", NextEverywhere: true}); s != StepSwitch {
		t.Fatalf("step %q, want Switch", s)
	}
	if a.Active.Certificate.Equal(first.Certificate) || len(a.Retiring) != 1 || !a.Retiring[0].CA.Certificate.Equal(first.Certificate) {
		t.Fatal("the old CA is not Retiring behind a new Active")
	}
	if want := now.Add(48 * time.Hour); !a.Retiring[0].Until.Equal(want) {
		t.Fatalf("retires at %s, want switch + max certificate duration %s", a.Retiring[0].Until, want)
	}
	// A queued forceRotation starts the next rotation at once.
	if s := step(RotationInput{ForceRotation: "r2"}); s != StepPublishNext {
		t.Fatalf("queued rotation: %q", s)
	}
	now = now.Add(48 * time.Hour)
	if s := step(RotationInput{ForceRotation: "r2"}); s != StepRetire || len(a.Retiring) != 0 {
		t.Fatalf("step %q, retiring %d", s, len(a.Retiring))
	}
}

func TestRotationDeadlines(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() (*CA, error) {
		return NewCA(CAOptions{ClusterDomain: "cluster.local", Duration: 600 * time.Hour, Now: now})
	}
	first, _ := mk()
	na := first.Certificate.NotAfter
	life := na.Sub(first.Certificate.NotBefore)
	next, _ := mk()
	a := Authorities{Active: first, Next: next, NextPublished: na.Add(-life / 3)}
	pol := RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 2160 * time.Hour}

	// The gate never opened (a target lags), and one sixth of the life is left: switch anyway, loudly.
	got, s, err := a.Plan(RotationInput{Now: na.Add(-life / 6), NewCA: mk}, pol)
	if err != nil || s != StepForcedSwitch || !got.ForcedSwitch {
		t.Fatalf("step %q (%v), forced %v", s, err, got.ForcedSwitch)
	}
	// The retiring CA leaves at its own notAfter when that comes before switch + max duration.
	if !got.Retiring[0].Until.Equal(na) {
		t.Fatalf("retires at %s, want its notAfter %s", got.Retiring[0].Until, na)
	}
	if _, s, _ := a.Plan(RotationInput{Now: na.Add(-life/6 - time.Minute), NewCA: mk}, pol); s != StepNone {
		t.Fatalf("before the one-sixth deadline: %q", s)
	}
}

func TestDistrustDropsTheOldCAOnceReissued(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() (*CA, error) {
		return NewCA(CAOptions{ClusterDomain: "cluster.local", Duration: 8760 * time.Hour, Now: now})
	}
	old, _ := mk()
	a := Authorities{Active: old}
	pol := RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 2160 * time.Hour, DistrustDwell: 5 * time.Second}
	a, s, err := a.Plan(RotationInput{Now: now, Distrust: "x", NewCA: mk}, pol)
	if err != nil || s != StepDistrust || a.Active.Certificate.Equal(old.Certificate) {
		t.Fatalf("step %q %v", s, err)
	}
	if _, s, _ := a.Plan(RotationInput{Now: now.Add(time.Hour), Distrust: "x", NewCA: mk}, pol); s != StepNone {
		t.Fatalf("dropped before every certificate was re-issued: %q", s)
	}
	if _, s, _ := a.Plan(RotationInput{Now: now.Add(4 * time.Second), Distrust: "x", Reissued: true, NewCA: mk}, pol); s != StepNone {
		t.Fatalf("dropped within DistrustDwell, before watching clients could re-issue: %q", s)
	}
	a, s, _ = a.Plan(RotationInput{Now: now.Add(5 * time.Second), Distrust: "x", Reissued: true, NewCA: mk}, pol)
	if s != StepDropDistrusted || len(a.Retiring) != 0 || len(a.Certificates()) != 1 {
		t.Fatalf("step %q, bundle %d", s, len(a.Certificates()))
	}
}

// TestDistrustDeadline: the pure decision behind --distrust-deadline. A distrusted CA leaves the bundle
// once everything it waits for is re-issued (after the dwell), or at its deadline whatever is left
// (StepDistrustDeadline); each distrusted CA counts from its own distrust.
func TestDistrustDeadline(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() (*CA, error) {
		return NewCA(CAOptions{ClusterDomain: "cluster.local", Duration: 8760 * time.Hour, Now: now})
	}
	old, _ := mk()
	older, _ := mk()
	pol := RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 2160 * time.Hour, DistrustDwell: 5 * time.Second, DistrustDeadline: 15 * time.Minute}
	distrusted, _, err := Authorities{Active: old}.Plan(RotationInput{Now: now, Distrust: "x", NewCA: mk}, pol)
	if err != nil {
		t.Fatal(err)
	}
	if r := distrusted.Retiring; len(r) != 1 || !r[0].Distrusted || !r[0].DistrustedAt.Equal(now) {
		t.Fatalf("after the distrust: %+v; want one distrusted CA, distrusted at %s", r, now)
	}
	if got, want := distrusted.DistrustDeadline(pol), now.Add(15*time.Minute); !got.Equal(want) {
		t.Errorf("DistrustDeadline = %s; want %s", got, want)
	}
	// A second CA distrusted earlier (by an earlier distrust) has its own, earlier deadline.
	two := distrusted
	two.Retiring = append([]Retiring{{CA: older, Distrusted: true, DistrustedAt: now.Add(-10 * time.Minute)}}, distrusted.Retiring...)

	cases := []struct {
		name       string
		a          Authorities
		pol        RotationPolicy
		at         time.Duration // after the distrust
		reissued   bool
		want       RotationStep
		wantLeft   int // CAs left in the bundle after the step
		wantLeftCA *CA
	}{
		{name: "pending, before the deadline: wait", a: distrusted, pol: pol, at: 15*time.Minute - time.Second, want: StepNone, wantLeft: 2},
		{name: "re-issued, within the dwell: wait", a: distrusted, pol: pol, at: 4 * time.Second, reissued: true, want: StepNone, wantLeft: 2},
		{name: "re-issued after the dwell: drop", a: distrusted, pol: pol, at: 5 * time.Second, reissued: true, want: StepDropDistrusted, wantLeft: 1},
		{name: "pending at the deadline: drop regardless", a: distrusted, pol: pol, at: 15 * time.Minute, want: StepDistrustDeadline, wantLeft: 1},
		{name: "re-issued and past the deadline: an ordinary drop", a: distrusted, pol: pol, at: time.Hour, reissued: true, want: StepDropDistrusted, wantLeft: 1},
		{name: "no deadline configured: wait for ever", a: distrusted, pol: RotationPolicy{DistrustDwell: 5 * time.Second}, at: 1000 * time.Hour, want: StepNone, wantLeft: 2},
		{name: "the earlier-distrusted CA reaches its deadline first", a: two, pol: pol, at: 5 * time.Minute, want: StepDistrustDeadline, wantLeft: 2, wantLeftCA: old},
		{name: "record without a distrust time counts from the switch", a: func() Authorities {
			a := distrusted
			a.Retiring = []Retiring{{CA: old, Distrusted: true}}
			return a
		}(), pol: pol, at: 15 * time.Minute, want: StepDistrustDeadline, wantLeft: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, step, err := tc.a.Plan(RotationInput{Now: now.Add(tc.at), Distrust: "x", Reissued: tc.reissued, NewCA: mk}, tc.pol)
			if err != nil {
				t.Fatal(err)
			}
			if step != tc.want {
				t.Fatalf("step %q; want %q", step, tc.want)
			}
			if n := len(got.Certificates()); n != tc.wantLeft {
				t.Errorf("%d CAs in the bundle; want %d", n, tc.wantLeft)
			}
			if tc.wantLeftCA != nil && !got.Retiring[0].CA.Certificate.Equal(tc.wantLeftCA.Certificate) {
				t.Errorf("the CA distrusted later left first")
			}
		})
	}
	// The loop sleeps until the deadline: NextDue names it.
	if got, want := distrusted.NextDue(pol, now), now.Add(15*time.Minute); !got.Equal(want) {
		t.Errorf("NextDue = %s; want the deadline %s", got, want)
	}
}

// TestNextDue: the rotation loop sleeps until NextDue, so it must name exactly the moment the clock makes
// a step due, and Plan must agree: nothing due just before it, a step due at it.
func TestNextDue(t *testing.T) {
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	life := 300 * 24 * time.Hour
	mk := func(now time.Time) *CA {
		ca, err := NewCA(CAOptions{ClusterDomain: "cluster.local", Duration: life, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	active, next := mk(start), mk(start.Add(time.Hour))
	nb, na := active.Certificate.NotBefore, active.Certificate.NotAfter
	realLife := na.Sub(nb)
	pol := RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 2160 * time.Hour}
	published := na.Add(-realLife / 3)
	retireAt := start.Add(10 * 24 * time.Hour)

	cases := []struct {
		name string
		a    Authorities
		// everywhere: every target holds the bundle (the grace end is then the step)
		everywhere bool
		// now is when NextDue is asked; zero: the start
		now      time.Time
		want     time.Time
		wantStep RotationStep
	}{
		{name: "young CA: the one-third mark", a: Authorities{Active: active}, want: na.Add(-realLife / 3), wantStep: StepPublishNext},
		{name: "Next published, targets hold it: the grace end", a: Authorities{Active: active, Next: next, NextPublished: published},
			everywhere: true, want: published.Add(pol.Grace), wantStep: StepSwitch},
		{name: "Next published after the one-sixth mark: a forced switch at the grace end", a: Authorities{Active: active, Next: next, NextPublished: na.Add(-realLife/6 + 2*time.Hour)},
			want: na.Add(-realLife/6 + 3*time.Hour), wantStep: StepForcedSwitch},
		{name: "Next published just before the one-sixth deadline: the grace end", a: Authorities{Active: active, Next: next, NextPublished: na.Add(-realLife/6 - time.Minute)},
			want: na.Add(-realLife/6 - time.Minute + pol.Grace), wantStep: StepForcedSwitch},
		{name: "a Retiring CA leaves first", a: Authorities{Active: active, Retiring: []Retiring{{CA: next, Until: retireAt}}},
			want: retireAt, wantStep: StepRetire},
		{name: "grace passed, targets lag: the forced switch, not the past grace end", a: Authorities{Active: active, Next: next, NextPublished: published},
			now: published.Add(2 * pol.Grace), want: na.Add(-realLife / 6), wantStep: StepForcedSwitch},
		{name: "a distrusted CA waits for re-issuance, not the clock", a: Authorities{Active: active, Retiring: []Retiring{{CA: next, Distrusted: true}}},
			want: na.Add(-realLife / 3), wantStep: StepPublishNext},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			asked := tc.now
			if asked.IsZero() {
				asked = start
			}
			got := tc.a.NextDue(pol, asked)
			if !got.Equal(tc.want) {
				t.Fatalf("NextDue = %s; want %s", got, tc.want)
			}
			in := RotationInput{NextEverywhere: tc.everywhere, NewCA: func() (*CA, error) { return mk(got), nil }}
			in.Now = got.Add(-time.Second)
			if _, step, err := tc.a.Plan(in, pol); err != nil || step != StepNone {
				t.Errorf("a second before NextDue: step %q, %v; want none", step, err)
			}
			in.Now = got
			if _, step, err := tc.a.Plan(in, pol); err != nil || step != tc.wantStep {
				t.Errorf("at NextDue: step %q, %v; want %q", step, err, tc.wantStep)
			}
		})
	}
	if !(Authorities{}).NextDue(pol, start).IsZero() {
		t.Error("no Active CA: NextDue is not zero")
	}
}

// TestPlanDistrustAndClockSafety: a distrust covers every CA older than the new one; a CA that stops
// signing keeps no key; no switch, not even a forced one, comes within the grace period of Next's
// publication; and Plan refuses to move on a clock behind the record, except for a distrust.
func TestPlanDistrustAndClockSafety(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	life := 600 * time.Hour
	mk := func(at time.Time) *CA {
		ca, err := NewCA(CAOptions{ClusterDomain: "cluster.local", Duration: life, Now: at})
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	active, next, retiring, distrusted := mk(now), mk(now), mk(now.Add(-time.Hour)), mk(now.Add(-2*time.Hour))
	na := active.Certificate.NotAfter
	realLife := na.Sub(active.Certificate.NotBefore)
	pol := RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 48 * time.Hour, DistrustDwell: 5 * time.Second, DistrustDeadline: 15 * time.Minute}
	full := Authorities{Active: active, Next: next, NextPublished: now.Add(time.Minute), LastStepAt: now.Add(time.Minute),
		Retiring:   []Retiring{{CA: retiring.WithoutKey(), Until: now.Add(40 * time.Hour)}, {CA: distrusted.WithoutKey(), Distrusted: true}},
		SwitchedAt: now.Add(-time.Minute)}
	lagging := Authorities{Active: active, Next: next, NextPublished: na.Add(-realLife/6 - time.Minute)}

	cases := []struct {
		name    string
		a       Authorities
		in      RotationInput
		want    RotationStep
		wantErr error
		check   func(t *testing.T, got Authorities)
	}{
		{name: "distrust: Active, Next and every Retiring CA are distrusted", a: full,
			in: RotationInput{Now: now.Add(2 * time.Minute), Distrust: "leak"}, want: StepDistrust,
			check: func(t *testing.T, got Authorities) {
				if len(got.Retiring) != 4 || got.Next != nil {
					t.Fatalf("after the distrust: %d Retiring, Next %v; want the 4 older CAs Retiring, no Next", len(got.Retiring), got.Next)
				}
				for i, r := range got.Retiring {
					if !r.Distrusted || r.CA.Key != nil {
						t.Errorf("Retiring %d: distrusted %v, key kept %v; want distrusted, no key", i, r.Distrusted, r.CA.Key != nil)
					}
				}
				if !got.Retiring[0].DistrustedAt.Equal(now.Add(2*time.Minute)) || !got.Retiring[1].DistrustedAt.Equal(now.Add(-time.Minute)) {
					t.Errorf("distrusted at %s and %s; want now, and the earlier distrust's time kept", got.Retiring[0].DistrustedAt, got.Retiring[1].DistrustedAt)
				}
				if got.Active.Key == nil || got.Active.Certificate.Equal(active.Certificate) {
					t.Error("the new Active CA is not a new CA with a key")
				}
			}},
		{name: "switch: the old Active CA keeps no key", a: Authorities{Active: active, Next: next, NextPublished: now},
			in: RotationInput{Now: now.Add(time.Hour), NextEverywhere: true}, want: StepSwitch,
			check: func(t *testing.T, got Authorities) {
				if len(got.Retiring) != 1 || got.Retiring[0].CA.Key != nil || got.Active.Key == nil {
					t.Fatal("after the switch the Retiring CA still has its key, or the Active one has none")
				}
				if !got.LastStepAt.Equal(now.Add(time.Hour)) {
					t.Errorf("LastStepAt %s; want the step's time", got.LastStepAt)
				}
			}},
		{name: "forced switch within the grace period: wait", a: lagging, in: RotationInput{Now: na.Add(-realLife / 6)}, want: StepNone},
		{name: "targets hold Next within the grace period: wait", a: lagging, in: RotationInput{Now: na.Add(-realLife / 6), NextEverywhere: true}, want: StepNone},
		{name: "forced switch once the grace period is over", a: lagging, in: RotationInput{Now: na.Add(-realLife/6 - time.Minute + time.Hour)}, want: StepForcedSwitch},
		{name: "clock before the Active CA's notBefore: refuse", a: Authorities{Active: active},
			in: RotationInput{Now: now.Add(-time.Hour), ForceRotation: "r"}, wantErr: ErrClockBehind},
		{name: "clock behind the last step beyond the tolerance: refuse", a: full,
			in: RotationInput{Now: now.Add(time.Minute - ClockTolerance - time.Second)}, wantErr: ErrClockBehind},
		{name: "clock behind the last step within the tolerance: go on", a: full,
			in: RotationInput{Now: now.Add(time.Minute - ClockTolerance + time.Second)}, want: StepNone},
		{name: "an old record's latest time stands in for the last step", a: Authorities{Active: active, SwitchedAt: now.Add(time.Hour)},
			in: RotationInput{Now: now.Add(time.Hour - ClockTolerance - time.Second), ForceRotation: "r"}, wantErr: ErrClockBehind},
		{name: "clock behind the last step: a distrust still proceeds", a: full,
			in: RotationInput{Now: now.Add(-time.Hour), Distrust: "leak"}, want: StepDistrust},
		{name: "Next not valid yet: no switch", a: Authorities{Active: active, Next: mk(now.Add(2 * time.Hour)), NextPublished: now},
			in: RotationInput{Now: now.Add(time.Hour), NextEverywhere: true}, wantErr: ErrClockBehind},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.in.NewCA = func() (*CA, error) { return mk(tc.in.Now), nil }
			got, step, err := tc.a.Plan(tc.in, pol)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v; want %v", err, tc.wantErr)
			}
			if step != tc.want {
				t.Fatalf("step %q; want %q", step, tc.want)
			}
			if step == StepNone && (got.Active != tc.a.Active || got.Next != tc.a.Next || len(got.Retiring) != len(tc.a.Retiring)) {
				t.Fatal("no step, but the state changed")
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}
}
