package servingcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
	"github.com/certapi/certapi/pkg/signer"
)

// handshake runs one TLS handshake over loopback TCP between a server with serverCfg and a client with
// clientCfg, and returns the client's view.
func handshake(t *testing.T, serverCfg, clientCfg *tls.Config) (*tls.ConnectionState, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_ = c.(*tls.Conn).Handshake()
	}()
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 10 * time.Second}, Config: clientCfg}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	state := c.(*tls.Conn).ConnectionState()
	return &state, nil
}

func existingRequest() *certapiv1alpha1.ServingCertRequest {
	return &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: testName, Namespace: testNS},
		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: testName},
	}
}

func TestNewValidatesOptions(t *testing.T) {
	cs := fake.NewClientset()
	for name, o := range map[string]Options{
		"no name":           {Client: cs, Namespace: "ns"},
		"no namespace":      {Client: cs, Name: "n"},
		"no client":         {Namespace: "ns", Name: "n"},
		"issuer and client": {Client: cs, Issuer: clientIssuer{cs}, Namespace: "ns", Name: "n"},
		"issuer and config": {RestConfig: &rest.Config{Host: "https://127.0.0.1"}, Issuer: clientIssuer{cs}, Namespace: "ns", Name: "n"},
		"negative CA delay": {Client: cs, Namespace: "ns", Name: "n", CAChangeDelay: -time.Second},
		"bad algorithm":     {Client: cs, Namespace: "ns", Name: "n", KeyAlgorithm: "Ed25519"},
		"jitter 1":          {Client: cs, Namespace: "ns", Name: "n", Jitter: 1},
		"negative jitter":   {Client: cs, Namespace: "ns", Name: "n", Jitter: -0.1},
		"backoff inverted":  {Client: cs, Namespace: "ns", Name: "n", InitialBackoff: time.Minute, MaxBackoff: time.Second},
		"create no svc":     {Client: cs, Namespace: "ns", Name: "n", CreateIfMissing: &certapiv1alpha1.ServingCertRequestSpec{}},
	} {
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
	s, err := New(Options{Client: cs, Namespace: "ns", Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if s.keyAlgorithm != signer.ECDSAP256 || s.jitter != DefaultJitter || s.initialBackoff != time.Second || s.maxBackoff != time.Minute || !s.watchCA ||
		s.caChangeDelay != MaxCAChangeDelay {
		t.Errorf("defaults: alg %s jitter %v backoff %s..%s watchCA %v caChangeDelay %s", s.keyAlgorithm, s.jitter, s.initialBackoff, s.maxBackoff, s.watchCA, s.caChangeDelay)
	}
}

func TestNoCertificateBeforeFirstIssuance(t *testing.T) {
	h := newHarness(t, harnessOptions{objects: []runtime.Object{existingRequest()}, opts: Options{DisableCAWatch: true}})
	h.setFailure(func() error { return apierrors.NewServiceUnavailable("no leader") })
	check := func() {
		t.Helper()
		if _, err := h.src.GetCertificate(&tls.ClientHelloInfo{}); !errors.Is(err, ErrNoCertificate) {
			t.Fatalf("GetCertificate before the first issuance: %v, want ErrNoCertificate", err)
		}
		if h.src.Ready() || h.src.Checker()(nil) == nil || !h.src.NotAfter().IsZero() || h.src.CABundle() != nil {
			t.Fatal("Ready, Checker, NotAfter or CABundle claims a certificate before the first issuance")
		}
		// A real handshake fails (and the server does not crash).
		if _, err := handshake(t, h.src.TLSConfig(), &tls.Config{InsecureSkipVerify: true}); err == nil { //nolint:gosec // only the failure matters
			t.Fatal("a TLS handshake succeeded without a certificate")
		}
	}
	check()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.src.WaitReady(ctx); err == nil {
		t.Fatal("WaitReady returned nil without a certificate")
	}

	h.start()
	for range 3 {
		h.advance()
	}
	d := h.nextWait()
	check()
	if e := h.log.matching("Could not get a serving certificate yet"); len(e) != 4 {
		t.Fatalf("%d failure logs for 4 failures, want 4", len(e))
	}

	h.setFailure(nil)
	h.clk.Step(d)
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.src.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if !h.src.Ready() || h.src.Checker()(nil) != nil {
		t.Fatal("not Ready after the first issuance")
	}
}

func TestIssuesServesAndRenewsWithJitter(t *testing.T) {
	randoms := []float64{0.5, 0, 0.999}
	i := 0
	h := newHarness(t, harnessOptions{objects: []runtime.Object{existingRequest()}, opts: Options{DisableCAWatch: true},
		random: func() float64 { r := randoms[i%len(randoms)]; i++; return r }})
	h.start()

	// renewalTime is notAfter - 20m = now + 40m; the wait is 40m less random*Jitter*40m.
	for n, want := range []time.Duration{38 * time.Minute, 40 * time.Minute, 40*time.Minute - time.Duration(0.999*0.1*float64(40*time.Minute))} {
		d := h.nextWait()
		if d != want {
			t.Fatalf("renewal %d: waits %s, want %s", n, d, want)
		}
		if got := h.issuedCount(); got != n+1 {
			t.Fatalf("%d certificates issued, want %d", got, n+1)
		}
		leaf := h.served()
		if leaf.SerialNumber.Cmp(h.lastIssued().SerialNumber) != 0 {
			t.Fatal("GetCertificate does not serve the latest certificate")
		}
		if !h.src.NotAfter().Equal(leaf.NotAfter) || !h.src.Ready() {
			t.Fatalf("NotAfter %s (leaf %s), Ready %v", h.src.NotAfter(), leaf.NotAfter, h.src.Ready())
		}
		h.clk.Step(d)
	}
	h.eventually("the fourth certificate", func() bool { return h.issuedCount() == 4 })
	h.nextWait()

	// Each certificate has its own key.
	keys := map[string]bool{}
	h.mu.Lock()
	for _, c := range h.issued {
		keys[string(c.RawSubjectPublicKeyInfo)] = true
	}
	h.mu.Unlock()
	if len(keys) != 4 {
		t.Fatalf("4 certificates with %d distinct keys", len(keys))
	}

	// A client that trusts only CABundle accepts the served certificate for <svc>.<ns>.svc.
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(h.src.CABundle()) {
		t.Fatal("CABundle holds no certificate")
	}
	state, err := handshake(t, h.src.TLSConfig(), &tls.Config{RootCAs: roots, ServerName: testName + "." + testNS + ".svc", Time: h.clk.Now})
	if err != nil {
		t.Fatalf("handshake trusting only CABundle: %v", err)
	}
	if got := state.PeerCertificates[0]; got.SerialNumber.Cmp(h.lastIssued().SerialNumber) != 0 {
		t.Fatal("the handshake did not present the latest certificate")
	}
}

func TestBackoffIsBoundedAndLogsTimeLeft(t *testing.T) {
	h := newHarness(t, harnessOptions{objects: []runtime.Object{existingRequest()}, opts: Options{DisableCAWatch: true},
		random: func() float64 { return 0.999999 }})
	h.start()
	h.nextWait() // renewal
	unavailable := func() error { return apierrors.NewServiceUnavailable("certapi is down") }
	h.setFailure(unavailable)
	h.clk.Step(h.src.renewalTimeForTest().Sub(h.clk.Now()))

	var got []time.Duration
	for range 10 {
		got = append(got, h.advance())
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60, 60, 60}
	for i, d := range got {
		w := want[i] * time.Second
		if d > w || d < w-time.Millisecond {
			t.Fatalf("backoff %d is %s, want about %s (all: %v)", i+1, d, w, got)
		}
	}
	h.nextWait()
	failures := h.log.matching("Renewing the serving certificate failed")
	if len(failures) != 11 {
		t.Fatalf("%d failure logs, want one per attempt (11)", len(failures))
	}
	for _, e := range failures {
		if e.err != nil {
			t.Fatalf("a failure while the certificate is valid is logged as an error: %s", e)
		}
		left, ok := e.value("timeLeft")
		if !ok || left.(time.Duration) <= 0 {
			t.Fatalf("failure log without timeLeft: %s", e)
		}
		if _, ok := e.value("retryIn"); !ok || !strings.Contains(e.String(), "certapi is down") {
			t.Fatalf("failure log without retryIn or the error: %s", e)
		}
	}
	if !h.src.Ready() {
		t.Fatal("not Ready while the certificate is still valid")
	}

	// Randomness keeps each delay in the upper half of its step.
	h.src.random = func() float64 { return 0 }
	if d := h.src.backoff(1); d != 500*time.Millisecond {
		t.Fatalf("backoff(1) with random 0 is %s, want 500ms", d)
	}
	if d := h.src.backoff(100); d != 30*time.Second {
		t.Fatalf("backoff(100) with random 0 is %s, want 30s", d)
	}
}

// renewalTimeForTest returns the current certificate's renewalTime.
func (s *Source) renewalTimeForTest() time.Time { return s.current.Load().renewalTime }

func TestExpiredCertificateIsServedLoudly(t *testing.T) {
	h := newHarness(t, harnessOptions{objects: []runtime.Object{existingRequest()}, opts: Options{DisableCAWatch: true, MaxBackoff: 10 * time.Minute}})
	h.renewBefore = 59 * time.Minute // renewal at +1m, expiry at +1h
	h.start()
	h.nextWait()
	first := h.served()
	h.setFailure(func() error { return errors.New("connection refused") })
	h.clk.Step(h.src.renewalTimeForTest().Sub(h.clk.Now()))

	var beforeExpiry, afterExpiry int
	for afterExpiry < 3 {
		if h.clk.Now().Before(first.NotAfter) {
			beforeExpiry++
			if !h.src.Ready() || h.src.Checker()(nil) != nil {
				t.Fatal("not Ready before expiry")
			}
		} else {
			afterExpiry++
		}
		h.advance()
	}
	pending := h.nextWait()
	if !h.clk.Now().After(first.NotAfter) {
		t.Fatal("the test did not reach expiry")
	}
	if h.src.Ready() {
		t.Fatal("Ready with an expired certificate")
	}
	if err := h.src.Checker()(nil); err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Checker with an expired certificate: %v", err)
	}
	// Decision: the expired certificate is still served, so that clients fail with a clear x509 expiry
	// error; everything else reports it.
	cert, err := h.src.GetCertificate(nil)
	if err != nil || cert.Leaf.SerialNumber.Cmp(first.SerialNumber) != 0 {
		t.Fatalf("GetCertificate after expiry: %v", err)
	}
	if _, err := h.src.GetCertificate(nil); err != nil {
		t.Fatal(err)
	}
	if got := len(h.log.matching("Serving an EXPIRED certificate")); got != 1 {
		t.Fatalf("%d expired-serving logs from two handshakes in a minute, want 1", got)
	}
	errorsLogged := 0
	for _, e := range h.log.all() {
		if e.err != nil && strings.Contains(e.msg, "has EXPIRED and renewal keeps failing") {
			errorsLogged++
		}
	}
	// Every attempt at or after notAfter logs at error level, and none before.
	if errorsLogged != afterExpiry+1 {
		t.Fatalf("%d error logs for %d attempts after expiry (log:\n%s)", errorsLogged, afterExpiry+1, h.log.String())
	}
	if got := len(h.log.matching("still serving the current one")); got != beforeExpiry {
		t.Fatalf("%d info logs for %d attempts before expiry", got, beforeExpiry)
	}
	// A client that verifies sees why.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(h.src.CABundle())
	_, err = handshake(t, h.src.TLSConfig(), &tls.Config{RootCAs: roots, ServerName: testName + "." + testNS + ".svc", Time: h.clk.Now})
	var invalid x509.CertificateInvalidError
	if !errors.As(err, &invalid) || invalid.Reason != x509.Expired {
		t.Fatalf("client handshake against the expired certificate: %v, want x509 Expired", err)
	}

	// Renewal comes back: Ready again with a new certificate.
	h.setFailure(nil)
	h.clk.Step(pending)
	h.eventually("a renewed certificate", h.src.Ready)
	if h.served().SerialNumber.Cmp(first.SerialNumber) == 0 {
		t.Fatal("still serving the expired certificate")
	}
}

func TestCAChangeTriggersReissue(t *testing.T) {
	ca1 := newCA(t, time.Now())
	h := newHarness(t, harnessOptions{objects: []runtime.Object{existingRequest(), caObject(ca1)}, ca: ca1})
	h.start()
	if d := h.nextWait(); d != 38*time.Minute {
		t.Fatalf("first wait %s, want the renewal's 38m", d)
	}
	h.eventually("the CA watch", func() bool { return h.countActions("watch", "certificateauthorities", "") == 1 })
	if got := h.served().AuthorityKeyId; !bytes.Equal(got, ca1.Certificate.SubjectKeyId) {
		t.Fatal("first certificate not from CA 1")
	}

	// A status change that keeps the Active CA (here: a bundle with a second CA, as in a rotation's
	// first step) re-issues nothing but updates CABundle.
	ca2 := newCA(t, h.clk.Now())
	both := caObject(ca1)
	both.Status.CABundle = string(signer.EncodeBundle(ca1.Certificate, ca2.Certificate))
	updateCA(t, h, both)
	h.eventually("CABundle with both CAs", func() bool { return bytes.Equal(h.src.CABundle(), []byte(both.Status.CABundle)) })
	select {
	case d := <-h.waits:
		t.Fatalf("a status change without a new Active CA started a new wait (%s)", d)
	case <-time.After(100 * time.Millisecond):
	}

	// The Active CA changes: a re-issue within min(30s, Jitter x remaining) x random (0.5) = 15s.
	h.ca.Store(ca2)
	switched := caObject(ca2)
	switched.Status.CABundle = both.Status.CABundle
	updateCA(t, h, switched)
	if d := h.nextWait(); d != 15*time.Second {
		t.Fatalf("wait after the CA change %s, want 15s", d)
	}
	h.clk.Step(15 * time.Second)
	if d := h.nextWait(); d != 38*time.Minute {
		t.Fatalf("wait after the re-issue %s, want the renewal's 38m", d)
	}
	if h.issuedCount() != 2 || !bytes.Equal(h.served().AuthorityKeyId, ca2.Certificate.SubjectKeyId) {
		t.Fatalf("%d certificates; the served one is not from CA 2", h.issuedCount())
	}

	// A status that names a CA the signer does not use yet gets one re-issue, not a loop.
	ca3 := newCA(t, h.clk.Now())
	updateCA(t, h, caObject(ca3))
	h.advance() // re-issue, still signed by CA 2
	if d := h.nextWait(); d != 38*time.Minute {
		t.Fatalf("wait after a re-issue that did not reach the named CA: %s, want the renewal's 38m (no loop)", d)
	}
	if h.issuedCount() != 3 {
		t.Fatalf("%d certificates, want 3", h.issuedCount())
	}
	if len(h.log.matching("not re-issuing again")) != 1 {
		t.Fatal("the mismatch is not logged")
	}
}

func updateCA(t *testing.T, h *harness, ca *certapiv1alpha1.CertificateAuthority) {
	t.Helper()
	cur, err := h.cs.Tracker().Get(caGVR, "", "default")
	if err != nil {
		t.Fatal(err)
	}
	ca.ResourceVersion = cur.(*certapiv1alpha1.CertificateAuthority).ResourceVersion
	if err := h.cs.Tracker().Update(caGVR, ca, ""); err != nil {
		t.Fatal(err)
	}
}

func TestCAWatchForbiddenIsLoggedOnce(t *testing.T) {
	h := newHarness(t, harnessOptions{objects: []runtime.Object{existingRequest()}, opts: Options{MaxBackoff: 5 * time.Minute}})
	h.src.caRetryInterval = 10 * time.Minute
	h.cs.PrependWatchReactor("certificateauthorities", func(a k8stesting.Action) (bool, watch.Interface, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "certapi.dev", Resource: "certificateauthorities"}, "default", errors.New("RBAC: no"))
	})
	h.start()
	h.nextWait()
	// Asked again after MaxBackoff (5m), then 10m, 10m: 25m in all, before the renewal's 38m.
	for i, d := range []time.Duration{5 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		h.eventually("the CA watch to wait", func() bool { return h.clk.Waiters() == 2 })
		h.clk.Step(d - time.Second)
		if n := h.countActions("watch", "certificateauthorities", ""); n != i+1 {
			t.Fatalf("%d watches of the CA %s after refusal %d, want %d", n, d-time.Second, i+1, i+1)
		}
		h.clk.Step(time.Second)
		h.eventually("another watch", func() bool { return h.countActions("watch", "certificateauthorities", "") == i+2 })
	}
	if n := len(h.log.matching("Not allowed to watch CertificateAuthority/default")); n != 1 {
		t.Fatalf("the refusal was logged %d times, want once", n)
	}
	if !h.src.Ready() {
		t.Fatal("not Ready without CA access")
	}
}

func TestCreateIfMissingCreatesOnce(t *testing.T) {
	spec := certapiv1alpha1.ServingCertRequestSpec{ServiceName: testName, Duration: &metav1.Duration{Duration: 2 * time.Hour}}
	h := newHarness(t, harnessOptions{opts: Options{DisableCAWatch: true, CreateIfMissing: &spec}})
	h.start()
	renewal := h.nextWait()
	if !h.src.Ready() {
		t.Fatal("not Ready")
	}
	obj, err := h.cs.Tracker().Get(scrGVR, testNS, testName)
	if err != nil {
		t.Fatalf("the request was not created: %v", err)
	}
	if got := obj.(*certapiv1alpha1.ServingCertRequest).Spec; got.ServiceName != testName || got.Duration.Duration != 2*time.Hour {
		t.Fatalf("created with spec %+v", got)
	}
	h.clk.Step(renewal)
	h.nextWait()
	if n := h.countActions("create", "servingcertrequests", ""); n != 1 {
		t.Fatalf("%d creates of the request, want 1", n)
	}
	if n := h.countActions("create", "servingcertrequests", "servingcerts"); n != 3 {
		t.Fatalf("%d issuances, want 3 (404, issue, renew)", n)
	}
}

func TestCreateIfMissingNeverTouchesAnExistingRequest(t *testing.T) {
	existing := existingRequest()
	existing.Spec.ServiceName = "other"
	existing.Spec.Duration = &metav1.Duration{Duration: 5 * time.Hour}
	want := existing.Spec.DeepCopy()
	spec := certapiv1alpha1.ServingCertRequestSpec{ServiceName: testName, Duration: &metav1.Duration{Duration: 2 * time.Hour}}
	h := newHarness(t, harnessOptions{objects: []runtime.Object{existing}, opts: Options{DisableCAWatch: true, CreateIfMissing: &spec}})
	// A 404 that is not about the request (say, the API is briefly not served) must not lead to an
	// overwrite either.
	notFound := 2
	h.setFailure(func() error {
		if notFound > 0 {
			notFound--
			return apierrors.NewNotFound(schema.GroupResource{Group: "certapi.dev", Resource: "servingcertrequests"}, testName)
		}
		return nil
	})
	h.start()
	h.advance()
	h.advance()
	h.nextWait()
	if !h.src.Ready() {
		t.Fatal("not Ready")
	}
	obj, err := h.cs.Tracker().Get(scrGVR, testNS, testName)
	if err != nil {
		t.Fatal(err)
	}
	if got := obj.(*certapiv1alpha1.ServingCertRequest).Spec; got.ServiceName != want.ServiceName || got.Duration.Duration != want.Duration.Duration {
		t.Fatalf("existing spec changed to %+v", got)
	}
	for _, a := range h.cs.Actions() {
		switch a.GetVerb() {
		case "update", "patch", "delete":
			t.Fatalf("unexpected %s of %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if n := h.countActions("create", "servingcertrequests", ""); n != 2 {
		t.Fatalf("%d create attempts, want one per 404 (2), each answered AlreadyExists", n)
	}
}

func TestWithoutCreateIfMissingAMissingRequestIsRetriedWithAHint(t *testing.T) {
	h := newHarness(t, harnessOptions{opts: Options{DisableCAWatch: true}})
	h.start()
	h.advance()
	h.nextWait()
	if n := h.countActions("create", "servingcertrequests", ""); n != 0 {
		t.Fatalf("created the request %d times without CreateIfMissing", n)
	}
	e := h.log.matching("Could not get a serving certificate yet")
	if len(e) != 2 {
		t.Fatalf("%d failure logs, want 2", len(e))
	}
	if hint, _ := e[0].value("hint"); !strings.Contains(hint.(string), "CreateIfMissing") {
		t.Fatalf("no hint: %s", e[0])
	}
	if err := h.src.Checker()(nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("Checker: %v, want the last error", err)
	}
}

func TestTLSOptsAndRunnable(t *testing.T) {
	s, err := New(Options{Client: fake.NewClientset(), Namespace: "ns", Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS10, Certificates: []tls.Certificate{{}}, NextProtos: []string{"h2"}}
	for _, o := range s.TLSOpts() {
		o(cfg)
	}
	if cfg.GetCertificate == nil || cfg.Certificates != nil || cfg.MinVersion != tls.VersionTLS12 || cfg.NextProtos[0] != "h2" {
		t.Fatalf("TLSOpts gave %+v", cfg)
	}
	if c := s.TLSConfig(); c.MinVersion != tls.VersionTLS12 || c.GetCertificate == nil {
		t.Fatal("TLSConfig")
	}
	if s.NeedLeaderElection() {
		t.Fatal("NeedLeaderElection is true: only the leader would get a certificate")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start on an ended context: %v", err)
	}
	if err := s.Start(context.Background()); err == nil {
		t.Fatal("a second Start was accepted")
	}
}

// recordingListener reads, at each Enqueue, the certificate the Source serves.
type recordingListener struct {
	src  *Source
	seen chan *x509.Certificate
}

func (l *recordingListener) Enqueue() {
	c, err := l.src.GetCertificate(nil)
	if err != nil {
		l.seen <- nil
		return
	}
	l.seen <- c.Leaf
}

// TestListenersAreToldOfEachCertificate: a listener is told after each certificate is served, and then
// reads that certificate, as a generic API server's dynamic serving certificate does.
func TestListenersAreToldOfEachCertificate(t *testing.T) {
	h := newHarness(t, harnessOptions{objects: []runtime.Object{existingRequest()}, opts: Options{DisableCAWatch: true}})
	l := &recordingListener{src: h.src, seen: make(chan *x509.Certificate, 10)}
	h.src.AddListener(l)
	h.start()
	for n := range 3 {
		var got *x509.Certificate
		select {
		case got = <-l.seen:
		case <-time.After(10 * time.Second):
			t.Fatalf("certificate %d: the listener was not told within 10s", n+1)
		}
		if got == nil || got.SerialNumber.Cmp(h.lastIssued().SerialNumber) != 0 {
			t.Fatalf("certificate %d: the listener read %v, not the certificate just issued", n+1, got)
		}
		if n < 2 {
			h.advance() // the renewal
		}
	}
	h.nextWait() // the loop waits for the next renewal: nothing more is served
	select {
	case extra := <-l.seen:
		t.Fatalf("told once more than the certificates issued (%v)", extra)
	default:
	}
}
