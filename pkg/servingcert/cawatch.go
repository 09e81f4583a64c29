package servingcert

import (
	"context"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cawatch"
)

// runCAWatch follows CertificateAuthority/default until ctx ends (cawatch.Follow): it calls changed with
// the Active CA's subject key id (lower case) each time that changes, and keeps CABundle up to date. A
// refusal (403) is logged once and asked again after MaxBackoff, doubling up to caRetryInterval, in case
// RBAC is granted later (or the refusal came from a replica that was starting); other failures are
// retried with the issuance's backoff and logged at verbosity 2, since renewal does not depend on this
// watch.
func (s *Source) runCAWatch(ctx context.Context, changed func(active string)) {
	var lastSent string
	var refused wait.Backoff
	_ = cawatch.Follow(ctx, caWatcher{s.issuer}, cawatch.Options{
		Clock:        s.clock,
		Backoff:      s.retryBackoff(),
		HealthyAfter: s.maxBackoff,
		Refused: func(refusals int, err error) time.Duration {
			if refusals == 1 {
				s.logger().Info("Not allowed to watch CertificateAuthority/default: the certificate is still renewed at its renewalTime, but not re-issued early when the Active CA changes",
					"err", err.Error(), "hint", "grant watch on certificateauthorities with resourceNames [default], or set Options.DisableCAWatch")
				refused = wait.Backoff{Duration: s.maxBackoff, Factor: 2, Cap: s.caRetryInterval, Steps: math.MaxInt32}
			}
			return refused.Step()
		},
		Allowed: func() {
			s.logger().Info("Watching CertificateAuthority/default now: the certificate is re-issued when the Active CA changes")
		},
		Failed: func(err error, retryIn time.Duration) {
			s.logger().V(2).Info("Watching CertificateAuthority/default failed; retrying", "err", err.Error(), "retryIn", retryIn.Round(time.Millisecond))
		},
	}, func(ca *certapiv1alpha1.CertificateAuthority) (bool, error) {
		if active, ok := s.observeCA(ca, &lastSent); ok {
			changed(active)
		}
		return false, nil
	})
}

// observeCA records the bundle of ca, and returns its Active CA's subject key id (lower case) with true
// when that differs from the last one returned (*lastSent).
func (s *Source) observeCA(ca *certapiv1alpha1.CertificateAuthority, lastSent *string) (string, bool) {
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
		return "", false
	}
	active := strings.ToLower(ca.Status.Active.SubjectKeyID)
	if active == *lastSent {
		return "", false
	}
	*lastSent = active
	return active, true
}
