package servingcert

import (
	"context"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// runCAWatch follows CertificateAuthority/default until ctx ends: it sends the Active CA on out each time
// it changes (out holds only the latest) and keeps CABundle up to date. It needs only watch, with the
// field selector metadata.name=default (so that RBAC resourceNames apply): a watch without a resource
// version starts with the object's current state, so no get or list is needed, and no resource version
// can be too old after certapi restarts. A refusal (403) is logged once and asked again after MaxBackoff,
// doubling up to caRetryInterval, in case RBAC is granted later (or the refusal came from a replica that
// was starting); other failures are retried with backoff and logged at verbosity 2, since renewal does not
// depend on this watch.
func (s *Source) runCAWatch(ctx context.Context, out chan certapiv1alpha1.CertificateAuthorityRef) {
	cas := s.client.CertapiV1alpha1().CertificateAuthorities()
	var (
		failures int
		refusals int // 403s in a row
		refused  bool
		lastSent string
	)
	for ctx.Err() == nil {
		w, err := cas.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", certapiv1alpha1.CertificateAuthorityName).String()})
		if err == nil {
			if refused {
				s.log.Info("Watching CertificateAuthority/default now: the certificate is re-issued when the Active CA changes")
				refused = false
			}
			refusals = 0
			begin := s.clock.Now()
			err = s.consumeCAWatch(ctx, w, out, &lastSent)
			w.Stop()
			if err == nil && s.clock.Since(begin) >= s.maxBackoff {
				failures = 0
				continue // the server ended a watch that ran for a while: start again at once
			}
		}
		if ctx.Err() != nil {
			return
		}
		var wait time.Duration
		if apierrors.IsForbidden(err) {
			// Usually RBAC that is not granted, but a replica that is starting can refuse for a moment
			// too: ask again after MaxBackoff, doubling up to caRetryInterval.
			refusals++
			wait = s.maxBackoff
			for i := 1; i < refusals && wait < s.caRetryInterval; i++ {
				wait *= 2
			}
			wait = min(wait, s.caRetryInterval)
			if !refused {
				refused = true
				s.log.Info("Not allowed to watch CertificateAuthority/default: the certificate is still renewed at its renewalTime, but not re-issued early when the Active CA changes",
					"err", err.Error(), "hint", "grant watch on certificateauthorities with resourceNames [default], or set Options.DisableCAWatch")
			}
		} else {
			failures++
			wait = s.backoff(failures)
			if err != nil {
				s.log.V(2).Info("Watching CertificateAuthority/default failed; retrying", "err", err.Error(), "retryIn", wait.Round(time.Millisecond))
			}
		}
		if !s.sleep(ctx, wait) {
			return
		}
	}
}

// consumeCAWatch handles events until the watch ends (nil), reports an error event, or ctx ends.
func (s *Source) consumeCAWatch(ctx context.Context, w watch.Interface, out chan certapiv1alpha1.CertificateAuthorityRef, lastSent *string) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				if ca, ok := ev.Object.(*certapiv1alpha1.CertificateAuthority); ok && ca.Name == certapiv1alpha1.CertificateAuthorityName {
					s.observeCA(ca, out, lastSent)
				}
			case watch.Error:
				return apierrors.FromObject(ev.Object)
			}
		}
	}
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

// sleep waits d on the Source's clock; false when ctx ended first.
func (s *Source) sleep(ctx context.Context, d time.Duration) bool {
	t := s.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
