package signer

import "time"

// MinRenewalDelay is the shortest time RenewalTime ever schedules ahead of
// now (unless the certificate expires sooner). A client that sleeps until its
// renewal time therefore never loops hot, even when the server hands it a
// certificate that is already due (a renewBefore close to the duration, or a
// CA near its end). One second keeps that promise while still honouring a
// renewBefore that asks for renewal a few seconds after issuance, which tests
// and short-lived setups use.
const MinRenewalDelay = time.Second

// RenewalTime says when a certificate valid from notBefore to notAfter should
// be renewed.
//
// The candidate is notAfter - *renewBefore when renewBefore is set, positive
// and shorter than the actual lifetime; otherwise two thirds into the actual
// lifetime. The actual lifetime starts at notBefore, or at now when notBefore
// lies in the past: notBefore is backdated for clock skew, and counting those
// minutes would put the renewal of a short-lived certificate before its
// issuance. The result is then clamped:
//
//   - never earlier than now + MinRenewalDelay, so that it is strictly in the
//     future and a sleeping client cannot loop;
//   - never after notAfter, unless notAfter is not after now (the certificate
//     has already expired), in which case the result is now + MinRenewalDelay.
//
// So the result is always after now. A caller that already knows its
// certificate is expired or missing should issue at once rather than wait.
func RenewalTime(notBefore, notAfter time.Time, renewBefore *time.Duration, now time.Time) time.Time {
	start := notBefore
	if now.After(start) && now.Before(notAfter) {
		start = now
	}
	lifetime := notAfter.Sub(start)
	var t time.Time
	if renewBefore != nil && *renewBefore > 0 && *renewBefore < lifetime {
		t = notAfter.Add(-*renewBefore)
	} else {
		t = start.Add(lifetime / 3 * 2)
	}
	earliest := now.Add(MinRenewalDelay)
	if t.Before(earliest) {
		t = earliest
	}
	if t.After(notAfter) && notAfter.After(now) {
		t = notAfter
	}
	return t
}
