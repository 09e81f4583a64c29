package servingcert

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cawatch"
	"github.com/certapi/certapi/pkg/signer"
)

// issued is one certificate with its key, as served; never modified after it is published.
type issued struct {
	cert        *tls.Certificate
	leaf        *x509.Certificate
	serial      string
	notAfter    time.Time
	renewalTime time.Time
	issuerKeyID string // the leaf's authority key id, lower-case hex: the SKI of the CA that signed it
}

// pendingKey is a key (and its CSR) made for the next issuance. It is kept across failed attempts, so
// that a slow RSA key is not remade on every retry, and dropped once a certificate is issued for it.
type pendingKey struct {
	key crypto.Signer
	csr string
}

// Start issues the first certificate, renews it before it is due, re-issues when the Active CA changes
// (unless Options.DisableCAWatch), and retries every failure with bounded backoff, until ctx ends; it
// then returns nil. It returns an error at once only when called a second time.
func (s *Source) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("servingcert: Start called twice")
	}
	caEvents := make(chan certapiv1alpha1.CertificateAuthorityRef, 1)
	var wg sync.WaitGroup
	if s.watchCA {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.runCAWatch(ctx, caEvents)
		}()
	}
	s.run(ctx, caEvents)
	wg.Wait()
	return nil
}

// run is the issuance loop: one attempt at a time, then a wait until the next one is due.
func (s *Source) run(ctx context.Context, caEvents <-chan certapiv1alpha1.CertificateAuthorityRef) {
	var (
		next     = s.clock.Now() // issue at once
		failures int
		pending  *pendingKey
		// active is the CA that signs now, as last seen on CertificateAuthority/default; handled is the
		// one a re-issue was already made for, so that a CA status ahead of the signer cannot loop.
		active, handled string
	)
	for {
		if !s.waitUntil(ctx, &next, caEvents, &active, handled) {
			return
		}

		var err error
		if pending == nil {
			pending, err = s.newPendingKey()
		}
		var is *issued
		if err == nil {
			is, err = s.issue(ctx, pending)
		}
		now := s.clock.Now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			d := s.backoff(failures)
			next = now.Add(d)
			s.setLastError(err)
			s.logFailure(err, failures, d, now)
			continue
		}
		pending = nil
		if failures > 0 {
			s.log.Info("Issuance works again", "failedAttempts", failures)
		}
		failures = 0
		if active != "" {
			handled = active
			if is.issuerKeyID != active {
				s.log.Info("The new certificate is not signed by the CA that CertificateAuthority/default names as Active; not re-issuing again for it",
					"issuerKeyID", is.issuerKeyID, "activeKeyID", active)
			}
		}
		next = s.renewAt(now, is.renewalTime)
		if earliest := now.Add(s.initialBackoff); next.Before(earliest) {
			// Only a clock far ahead of certapi's gets here (certapi's renewalTime is always in its
			// future): renew soon, but never in a tight loop.
			if !is.renewalTime.After(now) {
				s.log.Info("The certificate is already due for renewal by this clock; is it ahead of certapi's?", "renewalTime", is.renewalTime)
			}
			next = earliest
		}
		s.log.Info("Issued a serving certificate", "serial", is.serial, "notAfter", is.notAfter, "renewalTime", is.renewalTime,
			"renewIn", next.Sub(now).Round(time.Millisecond), "issuerKeyID", is.issuerKeyID)
	}
}

// waitUntil waits until *next, or less when a change of the Active CA (on caEvents, recorded in
// *active) calls for an earlier re-issue, and then moves *next there. It returns false when ctx ends.
func (s *Source) waitUntil(ctx context.Context, next *time.Time, caEvents <-chan certapiv1alpha1.CertificateAuthorityRef, active *string, handled string) bool {
	for {
		d := next.Sub(s.clock.Now())
		if d <= 0 {
			return ctx.Err() == nil
		}
		timer := s.clock.NewTimer(d)
		if s.testHookWait != nil {
			s.testHookWait(d)
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return false
			case ref := <-caEvents:
				*active = strings.ToLower(ref.SubjectKeyID)
				if at, ok := s.caChanged(*active, handled); ok && at.Before(*next) {
					*next = at
					timer.Stop()
					break wait
				}
			case <-timer.C():
				return ctx.Err() == nil
			}
		}
	}
}

// caChanged decides, for a newly seen Active CA, whether and when to re-issue: when the current
// certificate was signed by another CA and no re-issue has been made for this one yet, after a random
// delay of up to MaxCAChangeDelay (less when the certificate has less life left).
func (s *Source) caChanged(active, handled string) (time.Time, bool) {
	cur := s.current.Load()
	if cur == nil || active == "" || cur.issuerKeyID == active || active == handled {
		return time.Time{}, false
	}
	now := s.clock.Now()
	window := min(s.caChangeDelay, time.Duration(s.jitter*float64(cur.notAfter.Sub(now))))
	if s.distrusted.Load() {
		window = min(window, DistrustDelay)
	}
	delay := time.Duration(s.random() * float64(max(window, 0)))
	s.log.Info("The Active CA changed; re-issuing the serving certificate", "activeKeyID", active, "issuerKeyID", cur.issuerKeyID, "in", delay.Round(time.Millisecond))
	return now.Add(delay), true
}

// renewAt is renewalTime less a random part of up to Jitter of the time left before it.
func (s *Source) renewAt(now, renewalTime time.Time) time.Time {
	left := renewalTime.Sub(now)
	if left <= 0 {
		return now
	}
	return renewalTime.Add(-time.Duration(s.random() * s.jitter * float64(left)))
}

// backoff is the delay after the n-th failure in a row: InitialBackoff doubled n-1 times, capped at
// MaxBackoff, drawn at random from the upper half of that.
func (s *Source) backoff(n int) time.Duration {
	d := cawatch.Doubling(s.initialBackoff, s.maxBackoff, n)
	return d/2 + time.Duration(s.random()*float64(d-d/2))
}

func (s *Source) logFailure(err error, attempt int, retryIn time.Duration, now time.Time) {
	kv := []any{"attempt", attempt, "retryIn", retryIn.Round(time.Millisecond)}
	if hint := hintFor(err, s); hint != "" {
		kv = append(kv, "hint", hint)
	}
	cur := s.current.Load()
	switch {
	case cur == nil:
		s.log.Info("Could not get a serving certificate yet; TLS handshakes fail until one is issued", append(kv, "err", err.Error())...)
	case now.Before(cur.notAfter):
		s.log.Info("Renewing the serving certificate failed; still serving the current one, which is valid",
			append(kv, "err", err.Error(), "serial", cur.serial, "notAfter", cur.notAfter, "timeLeft", cur.notAfter.Sub(now).Round(time.Second))...)
	default:
		s.log.Error(err, "The serving certificate has EXPIRED and renewal keeps failing: clients that verify certificates reject every handshake",
			append(kv, "serial", cur.serial, "notAfter", cur.notAfter, "expiredFor", now.Sub(cur.notAfter).Round(time.Second))...)
	}
}

// hintFor says what to do about the failures a configuration can cause.
func hintFor(err error, s *Source) string {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("the client needs RBAC create on servingcertrequests/servingcerts (resourceNames: [%s]) in namespace %s", s.name, s.namespace)
	case apierrors.IsNotFound(err) && s.createSpec == nil:
		return fmt.Sprintf("create ServingCertRequest %s in namespace %s, or set Options.CreateIfMissing", s.name, s.namespace)
	case apierrors.IsNotFound(err):
		return "the certapi.dev API may not be installed or available (see APIService v1alpha1.certapi.dev)"
	}
	return ""
}

func (s *Source) newPendingKey() (*pendingKey, error) {
	key, err := signer.GenerateKey(s.keyAlgorithm)
	if err != nil {
		return nil, err
	}
	// Subject and SANs are ignored by certapi, which takes the identity from the ServingCertRequest.
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, fmt.Errorf("making a certificate request: %w", err)
	}
	return &pendingKey{key: key, csr: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))}, nil
}

// issue asks certapi for a certificate for p's key, creating the ServingCertRequest first when it is
// missing and Options.CreateIfMissing allows, and publishes the result.
func (s *Source) issue(ctx context.Context, p *pendingKey) (*issued, error) {
	out, err := s.createServingCert(ctx, p)
	if apierrors.IsNotFound(err) && s.createSpec != nil {
		created, cerr := s.createRequest(ctx)
		if cerr != nil {
			return nil, fmt.Errorf("issuing: %w; creating the missing ServingCertRequest: %w", err, cerr)
		}
		if !created {
			return nil, fmt.Errorf("issuing: %w", err) // it exists: the 404 was about something else
		}
		out, err = s.createServingCert(ctx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("issuing: %w", err)
	}
	is, bundle, err := s.parse(out, p.key)
	if err != nil {
		return nil, err
	}
	s.publish(is, bundle)
	return is, nil
}

func (s *Source) createServingCert(ctx context.Context, p *pendingKey) (*certapiv1alpha1.ServingCert, error) {
	ctx, cancel := context.WithTimeout(ctx, s.requestTimeout)
	defer cancel()
	return s.issuer.CreateServingCert(ctx, s.namespace, s.name,
		&certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: p.csr}})
}

// createRequest creates the ServingCertRequest with Options.CreateIfMissing's spec. It reports false,
// without error, when the request exists already: an existing spec is never touched.
func (s *Source) createRequest(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, s.requestTimeout)
	defer cancel()
	err := s.issuer.CreateServingCertRequest(ctx, &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.namespace},
		Spec:       *s.createSpec.DeepCopy(),
	})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, err
	}
	s.log.Info("Created the missing ServingCertRequest", "serviceName", s.createSpec.ServiceName)
	return true, nil
}

// parse checks a response: a certificate chain whose leaf certifies key and verifies against the
// returned bundle.
func (s *Source) parse(out *certapiv1alpha1.ServingCert, key crypto.Signer) (*issued, []byte, error) {
	if out == nil || out.Status.Certificate == "" {
		return nil, nil, errors.New("issuing: the response holds no certificate")
	}
	chain, err := signer.ParseBundle([]byte(out.Status.Certificate))
	if err != nil {
		return nil, nil, fmt.Errorf("issuing: the response's certificate: %w", err)
	}
	leaf := chain[0]
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(leaf.PublicKey) {
		return nil, nil, errors.New("issuing: the certificate returned is not for the key sent")
	}
	bundle := []byte(out.Status.CABundle)
	if len(bytes.TrimSpace(bundle)) > 0 {
		roots, err := signer.ParseBundle(bundle)
		if err != nil {
			return nil, nil, fmt.Errorf("issuing: the response's caBundle: %w", err)
		}
		pool := x509.NewCertPool()
		for _, r := range roots {
			pool.AddCert(r)
		}
		inter := x509.NewCertPool()
		for _, c := range chain[1:] {
			inter.AddCert(c)
		}
		// Only the chain is checked here, at a time the certificate is valid: clock skew is not our call.
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: leaf.NotBefore,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return nil, nil, fmt.Errorf("issuing: the certificate returned does not verify against the caBundle returned with it: %w", err)
		}
	}
	der := make([][]byte, len(chain))
	for i, c := range chain {
		der[i] = c.Raw
	}
	renewal := signer.RenewalTime(leaf.NotBefore, leaf.NotAfter, nil, s.clock.Now())
	if rt := out.Status.RenewalTime; rt != nil && !rt.IsZero() {
		renewal = rt.Time
	}
	if renewal.After(leaf.NotAfter) {
		renewal = leaf.NotAfter
	}
	return &issued{
		cert:        &tls.Certificate{Certificate: der, PrivateKey: key, Leaf: leaf},
		leaf:        leaf,
		serial:      signer.FormatSerialNumber(leaf.SerialNumber),
		notAfter:    leaf.NotAfter,
		renewalTime: renewal,
		issuerKeyID: signer.FormatKeyID(leaf.AuthorityKeyId),
	}, bundle, nil
}
