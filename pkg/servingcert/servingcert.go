package servingcert

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
)

// Defaults for Options.
const (
	DefaultJitter         = 0.1
	DefaultInitialBackoff = time.Second
	DefaultMaxBackoff     = time.Minute
	DefaultRequestTimeout = 30 * time.Second
	// MaxCAChangeDelay bounds the random delay before re-issuing after the Active CA changed, so that
	// the pods of every operator in the cluster do not all ask at the same instant (the default of
	// Options.CAChangeDelay).
	MaxCAChangeDelay = 30 * time.Second
	// DistrustDelay bounds that delay during a distrust, when the old CA leaves the bundle within seconds.
	DistrustDelay = time.Second
)

// ErrNoCertificate is wrapped by the error GetCertificate returns before the first certificate has been
// issued: the TLS handshake fails (the client sees an internal_error alert) rather than being served
// by a placeholder that no client trusts.
var ErrNoCertificate = errors.New("no serving certificate issued yet")

// Options configures a Source. Namespace, Name and one of Client, RestConfig or Issuer are required.
type Options struct {
	// Client talks to kube-apiserver. When nil, one is built from RestConfig.
	Client versioned.Interface
	// RestConfig is used to build a client when Client is nil. It is copied, never modified.
	RestConfig *rest.Config
	// Issuer, when set, replaces certapi's API (and Client and RestConfig, which must then be nil): a
	// test sets it to an in-memory CA from package servingcerttest, so that the code under test serves
	// TLS without a certapi server. Production code leaves it nil.
	Issuer Issuer

	// Namespace and Name name the ServingCertRequest whose servingcerts subresource issues the
	// certificates (and so the Service they are for).
	Namespace, Name string

	// KeyAlgorithm is the kind of private key made, in memory only, for each certificate. Default
	// signer.ECDSAP256. A new key is made for every certificate issued; keys are never written to
	// disk, to the API or to a log.
	KeyAlgorithm signer.KeyAlgorithm

	// CreateIfMissing, when set, makes the Source create the ServingCertRequest with this spec if
	// issuance finds that it does not exist. An existing request is never updated, whatever its spec.
	// It needs RBAC create on servingcertrequests in Namespace, which RBAC cannot limit to one name;
	// leave it nil and ship the ServingCertRequest with your manifests when that is too broad.
	CreateIfMissing *certapiv1alpha1.ServingCertRequestSpec

	// CAChangeDelay bounds the random delay before re-issuing after the Active CA changed. Default
	// MaxCAChangeDelay, which spreads the re-issues of every operator's pods in a cluster; a test that
	// rotates a CA and waits for the new certificate sets it to a millisecond.
	CAChangeDelay time.Duration

	// DisableCAWatch turns off the watch on CertificateAuthority/default, which re-issues the
	// certificate (after a random delay of up to MaxCAChangeDelay) as soon as the Active CA changes.
	// The watch needs RBAC watch on certificateauthorities (resourceNames: [default]); when
	// that is forbidden the Source says so once and carries on, renewing at renewalTime only.
	DisableCAWatch bool

	// Logger receives progress and failures. Default: klog.Background().WithName("servingcert").
	// Nothing logged ever contains key material.
	Logger logr.Logger
	// Clock is for tests; default the real clock.
	Clock clock.Clock

	// Jitter is the fraction, in (0, 1), of the time left before renewalTime that is taken off at
	// random, so that N pods renewing against one request spread out. Default DefaultJitter (0.1).
	Jitter float64
	// InitialBackoff and MaxBackoff bound the retry delay after a failed issuance: it doubles from
	// InitialBackoff up to MaxBackoff, each delay drawn at random from its upper half. Defaults 1s and 1m.
	InitialBackoff, MaxBackoff time.Duration
	// RequestTimeout bounds one issuance call, including client-go's own retries of 503 responses
	// with Retry-After. Default 30s.
	RequestTimeout time.Duration
}

// Source obtains serving certificates for one ServingCertRequest through the servingcerts
// subresource and hands them to TLS servers. Create it with New, run Start in a goroutine (or add it to a
// controller-runtime manager: it is a Runnable that every replica runs, not only the leader), and give
// TLSConfig or TLSOpts to the server. Every method is safe for concurrent use.
type Source struct {
	issuer         Issuer
	namespace      string
	name           string
	keyAlgorithm   signer.KeyAlgorithm
	createSpec     *certapiv1alpha1.ServingCertRequestSpec
	watchCA        bool
	log            logr.Logger
	clock          clock.Clock
	jitter         float64
	initialBackoff time.Duration
	maxBackoff     time.Duration
	requestTimeout time.Duration
	caChangeDelay  time.Duration

	// random returns a number in [0, 1); replaced by tests.
	random func() float64
	// testHookWait, when set, is called each time the issuance loop starts waiting d for its next
	// attempt (after the timer is made, so a fake clock can be stepped by d).
	testHookWait func(d time.Duration)
	// caRetryInterval is how long the CA watch waits before asking again once it has been refused.
	caRetryInterval time.Duration

	started atomic.Bool
	current atomic.Pointer[issued]
	// distrusted is set while CertificateAuthority/default says a distrusted CA is being dropped.
	distrusted atomic.Bool
	// lastExpiredLog is the unix nanos of the last "serving an expired certificate" log from GetCertificate.
	lastExpiredLog atomic.Int64

	mu        sync.Mutex
	bundle    []byte        // latest CA bundle, from an issuance or from CertificateAuthority/default
	lastErr   error         // the last issuance failure, nil after a success
	changed   chan struct{} // closed and replaced whenever the certificate changes
	listeners []Listener    // told of every new certificate (AddListener)
}

// Listener is told that a Source serves a new certificate. It has the shape of k8s.io/apiserver's
// dynamiccertificates.Listener, so a generic API server's dynamic serving certificate can follow a
// Source without this package depending on k8s.io/apiserver.
type Listener interface {
	// Enqueue is called after each new certificate is served; it must not block. The certificate is
	// read with GetCertificate.
	Enqueue()
}

// AddListener registers l to be told of every certificate the Source serves from now on: the push half
// of a Notifier, for a server that copies the certificate rather than calling GetCertificate on every
// handshake.
func (s *Source) AddListener(l Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, l)
}

// New checks o and returns a Source. It makes no API call; Start does the work.
func New(o Options) (*Source, error) {
	if o.Namespace == "" || o.Name == "" {
		return nil, errors.New("servingcert: Options.Namespace and Options.Name (the ServingCertRequest) are required")
	}
	issuer := o.Issuer
	switch {
	case issuer != nil && (o.Client != nil || o.RestConfig != nil):
		return nil, errors.New("servingcert: Options.Issuer replaces Options.Client and Options.RestConfig; set only one of them")
	case issuer != nil:
	case o.Client != nil:
		issuer = clientIssuer{o.Client}
	case o.RestConfig != nil:
		c, err := versioned.NewForConfig(rest.CopyConfig(o.RestConfig))
		if err != nil {
			return nil, fmt.Errorf("servingcert: building a client: %w", err)
		}
		issuer = clientIssuer{c}
	default:
		return nil, errors.New("servingcert: one of Options.Client, Options.RestConfig or Options.Issuer is required")
	}
	alg := o.KeyAlgorithm
	if alg == "" {
		alg = signer.ECDSAP256
	}
	known := false
	for _, a := range signer.SupportedKeyAlgorithms() {
		known = known || a == alg
	}
	if !known {
		return nil, fmt.Errorf("servingcert: unknown Options.KeyAlgorithm %q; accepted: %v", alg, signer.SupportedKeyAlgorithms())
	}
	if o.CreateIfMissing != nil && o.CreateIfMissing.ServiceName == "" {
		return nil, errors.New("servingcert: Options.CreateIfMissing.ServiceName is required")
	}
	jitter := o.Jitter
	if jitter == 0 {
		jitter = DefaultJitter
	}
	if jitter < 0 || jitter >= 1 {
		return nil, fmt.Errorf("servingcert: Options.Jitter is %v; want a fraction in (0, 1)", o.Jitter)
	}
	initial, maxBackoff, timeout := o.InitialBackoff, o.MaxBackoff, o.RequestTimeout
	if initial == 0 {
		initial = DefaultInitialBackoff
	}
	if maxBackoff == 0 {
		maxBackoff = DefaultMaxBackoff
	}
	if timeout == 0 {
		timeout = DefaultRequestTimeout
	}
	if initial < 0 || maxBackoff < initial || timeout < 0 {
		return nil, fmt.Errorf("servingcert: want 0 < InitialBackoff (%s) <= MaxBackoff (%s) and RequestTimeout (%s) > 0", initial, maxBackoff, timeout)
	}
	caDelay := o.CAChangeDelay
	if caDelay == 0 {
		caDelay = MaxCAChangeDelay
	}
	if caDelay < 0 {
		return nil, fmt.Errorf("servingcert: Options.CAChangeDelay is %s; want a positive duration (default %s)", caDelay, MaxCAChangeDelay)
	}
	log := o.Logger
	if log.GetSink() == nil {
		log = klog.Background().WithName("servingcert")
	}
	clk := o.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Source{
		issuer:          issuer,
		namespace:       o.Namespace,
		name:            o.Name,
		keyAlgorithm:    alg,
		createSpec:      o.CreateIfMissing.DeepCopy(),
		watchCA:         !o.DisableCAWatch,
		log:             log.WithValues("servingCertRequest", o.Namespace+"/"+o.Name),
		clock:           clk,
		jitter:          jitter,
		initialBackoff:  initial,
		maxBackoff:      maxBackoff,
		requestTimeout:  timeout,
		caChangeDelay:   caDelay,
		random:          rand.Float64,
		caRetryInterval: 10 * time.Minute,
		changed:         make(chan struct{}),
	}, nil
}

// GetCertificate is for tls.Config.GetCertificate. Before the first certificate is issued it returns an
// error wrapping ErrNoCertificate, so handshakes fail and nothing untrusted is served.
//
// Once the certificate has expired (renewal kept failing until notAfter) it is still returned, and the
// Source says so loudly: an error log on every renewal attempt and, at most once a minute, from here;
// Ready and Checker report false. A verifying client then fails with "x509: certificate has expired or is
// not yet valid: current time ... is after ...", which names the cause and the time at once, where a
// refused handshake would show it only an opaque "tls: internal error". No verifying client accepts the
// expired certificate, so serving it opens nothing.
func (s *Source) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cur := s.current.Load()
	if cur == nil {
		return nil, fmt.Errorf("servingcert: %w for ServingCertRequest %s/%s", ErrNoCertificate, s.namespace, s.name)
	}
	if now := s.clock.Now(); !now.Before(cur.notAfter) {
		last := s.lastExpiredLog.Load()
		if now.UnixNano()-last >= int64(time.Minute) && s.lastExpiredLog.CompareAndSwap(last, now.UnixNano()) {
			s.log.Error(s.lastError(), "Serving an EXPIRED certificate: renewal keeps failing, and clients that verify certificates reject every handshake",
				"serial", cur.serial, "notAfter", cur.notAfter, "expiredFor", now.Sub(cur.notAfter).Round(time.Second))
		}
	}
	return cur.cert, nil
}

// TLSConfig returns a new tls.Config for a server: TLS 1.2 or later, certificates from GetCertificate.
func (s *Source) TLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.GetCertificate}
}

// TLSOpts returns options for controller-runtime's webhook.Options.TLSOpts (and metrics server): they set
// GetCertificate (so the server reads no CertDir and no file) and raise MinVersion to TLS 1.2 when lower.
func (s *Source) TLSOpts() []func(*tls.Config) {
	return []func(*tls.Config){func(c *tls.Config) {
		c.GetCertificate = s.GetCertificate
		c.Certificates = nil
		if c.MinVersion < tls.VersionTLS12 {
			c.MinVersion = tls.VersionTLS12
		}
	}}
}

// CABundle returns the PEM bundle that clients of the Service should trust: from the latest issuance, or
// from CertificateAuthority/default when that is watched and changed since. Nil before the first issuance.
func (s *Source) CABundle() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.bundle...)
}

// Ready reports whether a certificate has been issued and has not expired.
func (s *Source) Ready() bool {
	cur := s.current.Load()
	return cur != nil && s.clock.Now().Before(cur.notAfter)
}

// WaitReady blocks until Ready or until ctx ends, and then returns ctx's error.
func (s *Source) WaitReady(ctx context.Context) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if s.Ready() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a serving certificate for %s/%s: %w (last error: %v)", s.namespace, s.name, ctx.Err(), s.lastError())
		case <-ch:
		}
	}
}

// NotAfter returns the current certificate's notAfter; zero before the first issuance.
func (s *Source) NotAfter() time.Time {
	if cur := s.current.Load(); cur != nil {
		return cur.notAfter
	}
	return time.Time{}
}

// Checker returns a readiness check (controller-runtime's healthz.Checker has this type): nil when
// Ready, otherwise an error that says why, with the last issuance failure.
func (s *Source) Checker() func(*http.Request) error {
	return func(*http.Request) error {
		cur := s.current.Load()
		if cur == nil {
			return fmt.Errorf("no serving certificate yet for ServingCertRequest %s/%s (last error: %v)", s.namespace, s.name, s.lastError())
		}
		if now := s.clock.Now(); !now.Before(cur.notAfter) {
			return fmt.Errorf("the serving certificate for ServingCertRequest %s/%s expired at %s and renewal is failing (last error: %v)",
				s.namespace, s.name, cur.notAfter.UTC().Format(time.RFC3339), s.lastError())
		}
		return nil
	}
}

// NeedLeaderElection returns false: every replica of an operator serves, so every replica needs its own
// certificate. controller-runtime runs a Runnable without this method only on the leader.
func (s *Source) NeedLeaderElection() bool { return false }

func (s *Source) lastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

func (s *Source) setLastError(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

// setBundle records a CA bundle; empty input is ignored.
func (s *Source) setBundle(b []byte) {
	if len(b) == 0 {
		return
	}
	s.mu.Lock()
	s.bundle = append([]byte(nil), b...)
	s.mu.Unlock()
}

// publish makes is the certificate served from now on, wakes WaitReady and tells the listeners.
func (s *Source) publish(is *issued, bundle []byte) {
	s.current.Store(is)
	s.mu.Lock()
	if len(bundle) > 0 {
		s.bundle = append([]byte(nil), bundle...)
	}
	s.lastErr = nil
	close(s.changed)
	s.changed = make(chan struct{})
	listeners := append([]Listener(nil), s.listeners...)
	s.mu.Unlock()
	for _, l := range listeners {
		l.Enqueue()
	}
}
