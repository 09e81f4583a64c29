package rotation

import (
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// TestUntilDue: the controller sleeps until the clock makes a step due, and while a distrust is pending
// also until its dwell ends (the distrust may then finish if everything was re-issued meanwhile). It
// never wakes on a fixed period: re-issuance arrives through Reissued.
func TestUntilDue(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func(at time.Time) *signer.CA {
		return signertest.NewCA(t, at, 300*24*time.Hour)
	}
	active, old := mk(now), mk(now.Add(-time.Hour))
	pol := signer.RotationPolicy{Grace: time.Hour, MaxCertificateDuration: 2160 * time.Hour,
		DistrustDwell: 5 * time.Second, DistrustDeadline: 15 * time.Minute}
	const moment = 10 * time.Millisecond
	cases := []struct {
		name string
		a    signer.Authorities
		want time.Duration
	}{
		{name: "no CA: nothing ahead", a: signer.Authorities{}, want: 0},
		{name: "a young CA: the one-third mark", a: signer.Authorities{Active: active},
			want: signer.Authorities{Active: active}.NextDue(pol, now).Sub(now) + moment},
		{name: "distrust just started: the dwell's end, not a poll", a: signer.Authorities{Active: active,
			Retiring: []signer.Retiring{{CA: old, Distrusted: true, DistrustedAt: now.Add(-2 * time.Second)}}},
			want: 3*time.Second + moment},
		{name: "distrust past its dwell: the deadline", a: signer.Authorities{Active: active,
			Retiring: []signer.Retiring{{CA: old, Distrusted: true, DistrustedAt: now.Add(-time.Minute)}}},
			want: 14*time.Minute + moment},
		{name: "grace passed while a target lags: no wake-up until the forced switch", a: signer.Authorities{Active: active, Next: old,
			NextPublished: now.Add(-2 * time.Hour)},
			want: active.Certificate.NotAfter.Add(-active.Certificate.NotAfter.Sub(active.Certificate.NotBefore)/6).Sub(now) + moment},
		{name: "a step already due: a moment", a: signer.Authorities{Active: active,
			Retiring: []signer.Retiring{{CA: old, Distrusted: true, DistrustedAt: now.Add(-time.Hour)}}},
			want: moment},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := untilDue(tc.a, pol, now); got != tc.want {
				t.Errorf("untilDue = %s; want %s", got, tc.want)
			}
		})
	}
}
