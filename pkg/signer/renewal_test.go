package signer

import (
	"testing"
	"time"
)

func TestRenewalTime(t *testing.T) {
	h := time.Hour
	dur := func(d time.Duration) *time.Duration { return &d }
	// A 168h certificate issued at testNow, backdated 5 minutes.
	nb := testNow.Add(-5 * time.Minute)
	na := testNow.Add(168 * h)
	// The lifetime that counts starts at issuance (testNow), not at the backdated notBefore.
	life := na.Sub(testNow)
	tests := []struct {
		name        string
		notBefore   time.Time
		notAfter    time.Time
		renewBefore *time.Duration
		now         time.Time
		want        time.Time
	}{
		{name: "renewBefore set", notBefore: nb, notAfter: na, renewBefore: dur(24 * h), now: testNow,
			want: na.Add(-24 * h)},
		{name: "unset: two thirds of the actual lifetime", notBefore: nb, notAfter: na, now: testNow,
			want: testNow.Add(life / 3 * 2)},
		{name: "zero renewBefore counts as unset", notBefore: nb, notAfter: na, renewBefore: dur(0), now: testNow,
			want: testNow.Add(life / 3 * 2)},
		{name: "negative renewBefore counts as unset", notBefore: nb, notAfter: na, renewBefore: dur(-h), now: testNow,
			want: testNow.Add(life / 3 * 2)},
		{name: "renewBefore equal to lifetime: two thirds", notBefore: nb, notAfter: na, renewBefore: dur(life), now: testNow,
			want: testNow.Add(life / 3 * 2)},
		{name: "renewBefore longer than lifetime: two thirds", notBefore: nb, notAfter: na, renewBefore: dur(1000 * h), now: testNow,
			want: testNow.Add(life / 3 * 2)},
		{name: "renewBefore just under lifetime: clamped to now + floor", notBefore: nb, notAfter: na, renewBefore: dur(life - time.Second), now: testNow,
			want: testNow.Add(MinRenewalDelay)},
		{name: "asked late: renewBefore within what remains", notBefore: nb, notAfter: na, renewBefore: dur(17 * h), now: testNow.Add(150 * h),
			want: na.Add(-17 * h)},
		{name: "asked late: renewBefore beyond what remains falls back to two thirds of the rest", notBefore: nb, notAfter: na, renewBefore: dur(24 * h), now: testNow.Add(150 * h),
			want: testNow.Add(162 * h)},
		{name: "short-lived: backdating does not pull renewal before issuance", notBefore: testNow.Add(-5 * time.Minute), notAfter: testNow.Add(30 * time.Second), now: testNow,
			want: testNow.Add(20 * time.Second)},
		{name: "floor never passes notAfter", notBefore: nb, notAfter: na, now: na.Add(-MinRenewalDelay / 2),
			want: na},
		{name: "expired: now + floor", notBefore: nb, notAfter: na, now: na.Add(h),
			want: na.Add(h + MinRenewalDelay)},
		{name: "expires exactly now: now + floor", notBefore: nb, notAfter: na, now: na,
			want: na.Add(MinRenewalDelay)},
		{name: "empty lifetime", notBefore: na, notAfter: na, now: testNow,
			want: na},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := RenewalTime(tt.notBefore, tt.notAfter, tt.renewBefore, tt.now)
			if !got.Equal(tt.want) {
				t.Fatalf("RenewalTime=%s, want %s", got, tt.want)
			}
			if !got.After(tt.now) {
				t.Fatalf("RenewalTime=%s is not after now=%s", got, tt.now)
			}
			if tt.notAfter.After(tt.now) && got.After(tt.notAfter) {
				t.Fatalf("RenewalTime=%s is after notAfter=%s", got, tt.notAfter)
			}
		})
	}
}
