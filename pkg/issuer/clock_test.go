package issuer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// memStore is a caStore in memory: one record, fenced on its revision.
type memStore struct {
	mu    sync.Mutex
	auth  signer.Authorities
	rec   *Recovery
	rev   int64
	saves int
}

func (m *memStore) load(context.Context) (loaded, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return loaded{auth: m.auth, modRevision: m.rev, found: m.rev > 0, recovery: m.rec}, nil
}

func (m *memStore) save(_ context.Context, a signer.Authorities, rec *Recovery, modRevision int64, _ string, _ int64) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if modRevision != m.rev {
		return 0, ErrFenced
	}
	if _, err := encodeRecord(a); err != nil {
		return 0, err
	}
	m.auth, m.rec, m.rev, m.saves = a, rec, m.rev+1, m.saves+1
	return m.rev, nil
}

// rotatingIssuer is an Issuer that leads with a CA made at clk's time, over a store in memory, with an
// election lease known valid for an hour.
func rotatingIssuer(t *testing.T, clk *clocktesting.FakePassiveClock) (*Issuer, *memStore) {
	t.Helper()
	ca := signertest.NewCA(t, clk.Now(), signer.DefaultCADuration)
	st := &memStore{}
	auth := signer.Authorities{Active: ca}
	rev, err := st.save(context.Background(), auth, nil, 0, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	i := &Issuer{cfg: Config{Clock: clk, ClusterDomain: "cluster.local", CADuration: signer.DefaultCADuration}, store: st, now: time.Now}
	i.termKey, i.termRev, i.modRev = "leader", 1, rev
	i.leaseGranted(time.Now(), time.Hour)
	i.setLeading(true, auth)
	return i, st
}

// TestClockJumps: the wall clock jumps 335 or 390 days ahead (a bad NTP source, a reset RTC) while the
// rotation loop runs, then is corrected. The loop takes at most one step per Rotate call and no switch
// comes within the grace period of Next's publication, so the jump publishes a Next CA and no more; once
// the clock is corrected, Rotate refuses (ErrClockBehind) and the Active CA still signs.
//
// Before, one Rotate call at +335 days published Next, switched to it at once (a sixth of the Active
// CA's life was left) and saved that; after the correction signing failed ("CA is not valid until
// 2031-...") and nothing could move the rotation on.
func TestClockJumps(t *testing.T) {
	today := time.Now().UTC().Truncate(time.Second)
	pol := signer.RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 2160 * time.Hour, DistrustDwell: 5 * time.Second, DistrustDeadline: 15 * time.Minute}
	req := RotationRequest{CADuration: signer.DefaultCADuration, Policy: pol}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sign := func(i *Issuer) error {
		_, err := i.Sign(Request{Namespace: "ns", Name: "web", ServiceName: "web", Duration: 24 * time.Hour, PublicKey: key.Public()})
		return err
	}
	// settle calls Rotate as the rotation loop does after each step, until no step is due.
	settle := func(t *testing.T, i *Issuer) ([]signer.RotationStep, error) {
		var all []signer.RotationStep
		for n := 0; n < 10; n++ {
			steps, err := i.Rotate(context.Background(), req)
			if len(steps) > 1 {
				t.Fatalf("one Rotate call took %d steps: %v", len(steps), steps)
			}
			all = append(all, steps...)
			if err != nil || len(steps) == 0 {
				return all, err
			}
		}
		t.Fatalf("the rotation did not settle: %v", all)
		return nil, nil
	}
	for _, tc := range []struct {
		name  string
		jumps []time.Duration
	}{
		{"+335 days", []time.Duration{335 * 24 * time.Hour}},
		{"+390 days", []time.Duration{390 * 24 * time.Hour}},
		{"+335 days, a minute later +390 days", []time.Duration{335 * 24 * time.Hour, 390 * 24 * time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakePassiveClock(today)
			i, st := rotatingIssuer(t, clk)
			first, _, _ := i.Signing()
			for _, jump := range tc.jumps {
				clk.SetTime(today.Add(jump))
				steps, err := settle(t, i)
				if err != nil {
					t.Fatalf("at %s: %v", jump, err)
				}
				if slices.Contains(steps, signer.StepSwitch) || slices.Contains(steps, signer.StepForcedSwitch) || slices.Contains(steps, signer.StepRetire) {
					t.Fatalf("at %s the loop took %v: a jump of the clock ran the rotation through", jump, steps)
				}
			}
			// The clock is corrected: Rotate refuses and saves nothing, and the Active CA still signs.
			clk.SetTime(today.Add(time.Minute))
			saves := st.saves
			if _, err := i.Rotate(context.Background(), req); !errors.Is(err, signer.ErrClockBehind) {
				t.Fatalf("Rotate with the corrected clock: %v; want ErrClockBehind", err)
			}
			if st.saves != saves {
				t.Fatal("Rotate with the corrected clock saved a state")
			}
			if ca, _, _ := i.Signing(); !ca.Certificate.Equal(first.Certificate) {
				t.Fatal("the Active CA changed")
			}
			if err := sign(i); err != nil {
				t.Fatalf("signing after the clock was corrected: %v", err)
			}
		})
	}
}
