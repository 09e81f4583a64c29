package servingcert

import (
	"context"
	"strings"
	"time"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cawatch"
)

// runCAWatch follows CertificateAuthority/default until ctx ends (cawatch.Follow): it sends the Active CA
// on out each time it changes (out holds only the latest) and keeps CABundle up to date. A refusal (403)
// is logged once and asked again after MaxBackoff, doubling up to caRetryInterval, in case RBAC is
// granted later (or the refusal came from a replica that was starting); other failures are retried with
// backoff and logged at verbosity 2, since renewal does not depend on this watch.
func (s *Source) runCAWatch(ctx context.Context, out chan certapiv1alpha1.CertificateAuthorityRef) {
	var lastSent string
	_ = cawatch.Follow(ctx, caWatcher{s.issuer}, cawatch.Options{
		Clock:        s.clock,
		Backoff:      s.backoff,
		HealthyAfter: s.maxBackoff,
		Refused: func(refusals int, err error) time.Duration {
			if refusals == 1 {
				s.log.Info("Not allowed to watch CertificateAuthority/default: the certificate is still renewed at its renewalTime, but not re-issued early when the Active CA changes",
					"err", err.Error(), "hint", "grant watch on certificateauthorities with resourceNames [default], or set Options.DisableCAWatch")
			}
			return cawatch.Doubling(s.maxBackoff, s.caRetryInterval, refusals)
		},
		Allowed: func() {
			s.log.Info("Watching CertificateAuthority/default now: the certificate is re-issued when the Active CA changes")
		},
		Failed: func(err error, retryIn time.Duration) {
			s.log.V(2).Info("Watching CertificateAuthority/default failed; retrying", "err", err.Error(), "retryIn", retryIn.Round(time.Millisecond))
		},
	}, func(ca *certapiv1alpha1.CertificateAuthority) (bool, error) {
		s.observeCA(ca, out, &lastSent)
		return false, nil
	})
}

// observeCA records the bundle of ca and sends its Active CA when that differs from the last one sent.
func (s *Source) observeCA(ca *certapiv1alpha1.CertificateAuthority, out chan certapiv1alpha1.CertificateAuthorityRef, lastSent *string) {
	if s.current.Load() != nil {
		// Before the first issuance the bundle comes with the certificate, so CABundle never names a
		// CA without a certificate to go with it.
		s.setBundle([]byte(ca.Status.CABundle))
	}
	// A distrusted CA leaves the bundle as soon as certapi's own Secrets and replicas are re-issued:
	// re-issue at once then, not after the usual spread-out delay.
	distrusted := false
	for _, c := range ca.Status.Conditions {
		if c.Type == certapiv1alpha1.ConditionRotating && c.Reason == certapiv1alpha1.RotatingReasonDistrusted {
			distrusted = true
		}
	}
	s.distrusted.Store(distrusted)
	if ca.Status.Active == nil || ca.Status.Active.SubjectKeyID == "" {
		return
	}
	ref := *ca.Status.Active
	ref.SubjectKeyID = strings.ToLower(ref.SubjectKeyID)
	if ref.SubjectKeyID == *lastSent {
		return
	}
	*lastSent = ref.SubjectKeyID
	// One sender: when the buffer is full, replace what is there with the latest.
	select {
	case out <- ref:
	default:
		select {
		case <-out:
		default:
		}
		out <- ref
	}
}
