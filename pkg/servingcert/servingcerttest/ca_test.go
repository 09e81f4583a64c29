package servingcerttest_test

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	testingclock "k8s.io/utils/clock/testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/servingcert"
	"github.com/certapi/certapi/pkg/servingcert/servingcerttest"
	"github.com/certapi/certapi/pkg/signer"
)

const (
	ns  = "my-system"
	svc = "my-webhook"
)

func request(name string, spec certapiv1alpha1.ServingCertRequestSpec) *certapiv1alpha1.ServingCertRequest {
	return &certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func newCA(t *testing.T, o servingcerttest.Options) *servingcerttest.CA {
	t.Helper()
	ca, err := servingcerttest.NewCA(o)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func csr(t *testing.T) (string, *x509.CertificateRequest) {
	t.Helper()
	key, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), parsed
}

func pool(t *testing.T, bundle []byte) *x509.CertPool {
	t.Helper()
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(bundle) {
		t.Fatalf("no certificate in bundle %q", bundle)
	}
	return p
}

func hours(h int) *metav1.Duration { return &metav1.Duration{Duration: time.Duration(h) * time.Hour} }

func TestAddRequest(t *testing.T) {
	ca := newCA(t, servingcerttest.Options{})
	for _, tc := range []struct {
		name    string
		scr     *certapiv1alpha1.ServingCertRequest
		wantErr string // "" when accepted
	}{
		{"service only", request("a", certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc}), ""},
		{"names of the namespace", request("b", certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc,
			DNSNames: []string{"other." + ns + ".svc", "*." + svc + "." + ns + ".svc.cluster.local"}}), ""},
		{"short duration and renewBefore", request("c", certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc,
			Duration: &metav1.Duration{Duration: time.Minute}, RenewBefore: &metav1.Duration{Duration: 30 * time.Second}}), ""},
		{"nil", nil, "no ServingCertRequest"},
		{"no service", request("d", certapiv1alpha1.ServingCertRequestSpec{}), "spec.serviceName is required"},
		{"no namespace", &certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Name: "e"},
			Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc}}, "metadata.namespace is required"},
		{"service not a DNS-1035 label", request("f", certapiv1alpha1.ServingCertRequestSpec{ServiceName: "1abc"}), "spec.serviceName"},
		{"name of another namespace", request("g", certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc,
			DNSNames: []string{"x.other.svc"}}), "x.other.svc"},
		{"external name", request("h", certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc,
			DNSNames: []string{"example.com"}}), "example.com"},
		{"renewBefore not under duration", request("i", certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc,
			Duration: hours(1), RenewBefore: hours(1)}), "spec.renewBefore"},
		{"negative duration", request("j", certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc,
			Duration: &metav1.Duration{Duration: -time.Hour}}), "spec.duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ca.AddRequest(tc.scr)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

func TestCreateServingCert(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	ca := newCA(t, servingcerttest.Options{Clock: clk})
	for _, scr := range []*certapiv1alpha1.ServingCertRequest{
		request(svc, certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc}),
		request("short", certapiv1alpha1.ServingCertRequestSpec{ServiceName: "short", Duration: hours(2), RenewBefore: hours(1),
			DNSNames: []string{"extra." + ns + ".svc"}}),
	} {
		if err := ca.AddRequest(scr); err != nil {
			t.Fatal(err)
		}
	}
	good, goodCSR := csr(t)
	unavailable := apierrors.NewServiceUnavailable("no leader")
	for _, tc := range []struct {
		name      string
		request   string
		csr       string
		duration  *metav1.Duration
		fail      error
		wantErr   func(error) bool
		wantNames []string
		wantLife  time.Duration
		wantRenew time.Duration // after now
	}{
		{name: "default duration", request: svc, csr: good,
			wantNames: []string{svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"},
			wantLife:  certapiv1alpha1.DefaultDuration, wantRenew: certapiv1alpha1.DefaultDuration * 2 / 3},
		{name: "renewBefore and extra names", request: "short", csr: good,
			wantNames: []string{"short." + ns + ".svc", "short." + ns + ".svc.cluster.local", "extra." + ns + ".svc"},
			wantLife:  2 * time.Hour, wantRenew: time.Hour},
		{name: "shorter duration asked", request: svc, csr: good, duration: hours(3),
			wantNames: []string{svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"},
			wantLife:  3 * time.Hour, wantRenew: 2 * time.Hour},
		{name: "missing request", request: "missing", csr: good, wantErr: apierrors.IsNotFound},
		{name: "not a CSR", request: svc, csr: "hello", wantErr: apierrors.IsInvalid},
		{name: "longer than the request", request: "short", csr: good, duration: hours(3), wantErr: apierrors.IsInvalid},
		{name: "failing", request: svc, csr: good, fail: unavailable, wantErr: apierrors.IsServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca.Fail(tc.fail)
			defer ca.Fail(nil)
			out, err := ca.CreateServingCert(context.Background(), ns, tc.request,
				&certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: tc.csr, Duration: tc.duration}})
			if tc.wantErr != nil {
				if err == nil || !tc.wantErr(err) {
					t.Fatalf("got error %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			chain, err := signer.ParseBundle([]byte(out.Status.Certificate))
			if err != nil {
				t.Fatal(err)
			}
			leaf := chain[0]
			if !leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(goodCSR.PublicKey) {
				t.Error("the certificate is not for the CSR's key")
			}
			if strings.Join(leaf.DNSNames, ",") != strings.Join(tc.wantNames, ",") {
				t.Errorf("names %v, want %v", leaf.DNSNames, tc.wantNames)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool(t, []byte(out.Status.CABundle)), DNSName: tc.wantNames[0],
				CurrentTime: clk.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				t.Errorf("does not verify against the caBundle returned: %v", err)
			}
			if got := leaf.NotAfter.Sub(clk.Now()); got != tc.wantLife {
				t.Errorf("lifetime %s, want %s", got, tc.wantLife)
			}
			if got := out.Status.RenewalTime.Sub(clk.Now()); got != tc.wantRenew {
				t.Errorf("renewal in %s, want %s", got, tc.wantRenew)
			}
			if out.Status.SerialNumber != signer.FormatSerialNumber(leaf.SerialNumber) {
				t.Errorf("serial %s, the certificate's %s", out.Status.SerialNumber, signer.FormatSerialNumber(leaf.SerialNumber))
			}
		})
	}
	if n := len(ca.Issued()); n != 3 {
		t.Errorf("Issued holds %d certificates, want 3", n)
	}
}

func TestCreateServingCertRequest(t *testing.T) {
	ca := newCA(t, servingcerttest.Options{})
	ctx := context.Background()
	if err := ca.CreateServingCertRequest(ctx, request(svc, certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc})); err != nil {
		t.Fatal(err)
	}
	// An existing request is left as it is.
	err := ca.CreateServingCertRequest(ctx, request(svc, certapiv1alpha1.ServingCertRequestSpec{ServiceName: "other"}))
	if !apierrors.IsAlreadyExists(err) {
		t.Fatalf("second create: %v, want AlreadyExists", err)
	}
	if err := ca.CreateServingCertRequest(ctx, request("bad", certapiv1alpha1.ServingCertRequestSpec{})); !apierrors.IsBadRequest(err) {
		t.Fatalf("invalid create: %v, want BadRequest", err)
	}
	pemCSR, _ := csr(t)
	out, err := ca.CreateServingCert(ctx, ns, svc, &certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: pemCSR}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.Status.Certificate, "BEGIN CERTIFICATE") {
		t.Fatalf("no certificate: %+v", out.Status)
	}
}

// nextEvent reads one event from w, or fails after 10s.
func nextEvent(t *testing.T, w watch.Interface) *certapiv1alpha1.CertificateAuthority {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev.Object.(*certapiv1alpha1.CertificateAuthority)
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return nil
	}
}

func TestRotationSteps(t *testing.T) {
	ca := newCA(t, servingcerttest.Options{})
	w, err := ca.WatchCertificateAuthority(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	first := ca.Active()
	if got := nextEvent(t, w); got.Status.Active.SubjectKeyID != signer.FormatKeyID(first.SubjectKeyId) {
		t.Fatalf("the first event names Active %s, want %s", got.Status.Active.SubjectKeyID, signer.FormatKeyID(first.SubjectKeyId))
	}
	var second *x509.Certificate
	for _, step := range []struct {
		name       string
		do         func() error
		wantRoles  []certapiv1alpha1.CertificateAuthorityRole
		wantReason string
		newActive  bool
	}{
		{"PublishNext", ca.PublishNext, []certapiv1alpha1.CertificateAuthorityRole{"Active", "Next"}, certapiv1alpha1.RotatingReasonNextPublished, false},
		{"Rotate", ca.Rotate, []certapiv1alpha1.CertificateAuthorityRole{"Active", "Retiring"}, certapiv1alpha1.RotatingReasonRetiring, true},
		{"DropRetiring", func() error { ca.DropRetiring(); return nil }, []certapiv1alpha1.CertificateAuthorityRole{"Active"}, certapiv1alpha1.RotatingReasonIdle, false},
		{"Rotate without PublishNext", ca.Rotate, []certapiv1alpha1.CertificateAuthorityRole{"Active", "Retiring"}, certapiv1alpha1.RotatingReasonRetiring, true},
	} {
		t.Run(step.name, func(t *testing.T) {
			before := ca.Active()
			if err := step.do(); err != nil {
				t.Fatal(err)
			}
			got := nextEvent(t, w)
			var roles []certapiv1alpha1.CertificateAuthorityRole
			for _, c := range got.Status.Certificates {
				roles = append(roles, c.Role)
			}
			if len(roles) != len(step.wantRoles) || strings.Join(toStrings(roles), ",") != strings.Join(toStrings(step.wantRoles), ",") {
				t.Errorf("roles %v, want %v", roles, step.wantRoles)
			}
			for _, c := range got.Status.Conditions {
				if c.Type == certapiv1alpha1.ConditionRotating && c.Reason != step.wantReason {
					t.Errorf("Rotating reason %s, want %s", c.Reason, step.wantReason)
				}
			}
			if got.Status.CABundle != string(ca.CABundle()) {
				t.Error("the watched bundle is not CABundle()")
			}
			bundle, err := signer.ParseBundle(ca.CABundle())
			if err != nil {
				t.Fatal(err)
			}
			if len(bundle) != len(step.wantRoles) || !bundle[0].Equal(ca.Active()) {
				t.Errorf("CABundle holds %d certificates, want %d, the Active one first", len(bundle), len(step.wantRoles))
			}
			if changed := !ca.Active().Equal(before); changed != step.newActive {
				t.Errorf("Active changed: %v, want %v", changed, step.newActive)
			}
			if step.name == "Rotate" {
				second = ca.Active()
				if second.Equal(first) || !bundle[1].Equal(first) {
					t.Error("Rotate did not keep the previous Active CA in the bundle as Retiring")
				}
			}
		})
	}
	w.Stop()
	if _, ok := <-w.ResultChan(); ok {
		t.Error("the watch's channel is open after Stop")
	}
	if err := ca.Rotate(); err != nil { // no send on a stopped watch
		t.Fatal(err)
	}
}

func toStrings(roles []certapiv1alpha1.CertificateAuthorityRole) []string {
	out := make([]string, len(roles))
	for i, r := range roles {
		out[i] = string(r)
	}
	return out
}

// startSource runs a Source on ca until the test ends.
func startSource(t *testing.T, o servingcert.Options) *servingcert.Source {
	t.Helper()
	src, err := servingcert.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = src.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return src
}

// handshake connects to a TLS server with src's configuration as a client of <svc>.<ns>.svc trusting
// roots, and returns the certificate served.
func handshake(t *testing.T, src *servingcert.Source, roots []byte) (*x509.Certificate, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", src.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	}()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", ln.Addr().String(),
		&tls.Config{RootCAs: pool(t, roots), ServerName: svc + "." + ns + ".svc"})
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], nil
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func signedBy(cert, ca *x509.Certificate) bool { return cert.CheckSignatureFrom(ca) == nil }

// The Source the operator holds is servingcert's own: Ready, served over TLS, trusted through CABundle,
// and moved to the new CA by a rotation, with trust kept across it.
func TestSourceThroughARotation(t *testing.T) {
	ca := newCA(t, servingcerttest.Options{})
	if err := ca.AddRequest(request(svc, certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc})); err != nil {
		t.Fatal(err)
	}
	src := startSource(t, servingcert.Options{Issuer: ca, Namespace: ns, Name: svc, CAChangeDelay: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := src.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	first := ca.Active()
	served, err := handshake(t, src, ca.CABundle())
	if err != nil || !signedBy(served, first) {
		t.Fatalf("first handshake: %v (signed by the Active CA: %v)", err, err == nil && signedBy(served, first))
	}
	if string(src.CABundle()) != string(ca.CABundle()) {
		t.Error("the Source's CABundle is not the CA's")
	}

	if err := ca.PublishNext(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the Source to see the Next CA in the bundle", func() bool { return string(src.CABundle()) == string(ca.CABundle()) })
	if served, err := handshake(t, src, ca.CABundle()); err != nil || !signedBy(served, first) {
		t.Fatalf("after PublishNext the certificate should still be the first CA's: %v", err)
	}

	if err := ca.Rotate(); err != nil {
		t.Fatal(err)
	}
	second := ca.Active()
	if err := ca.WaitServing(ctx, src); err != nil {
		t.Fatalf("the Source did not re-issue from the new Active CA: %v", err)
	}
	ca.DropRetiring()
	if served, err := handshake(t, src, ca.CABundle()); err != nil || !signedBy(served, second) {
		t.Fatalf("after the rotation: %v", err)
	}
	if _, err := handshake(t, src, signer.EncodeBundle(first)); err == nil {
		t.Error("a client trusting only the old CA still accepts the new certificate")
	}
}

// Fail keeps the Source from its first certificate (not Ready, the error in Checker) until it is
// cleared; CreateIfMissing creates the request in the double as in certapi.
func TestSourceWhileIssuanceFails(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*servingcerttest.CA, *servingcert.Options) error
	}{
		{"request shipped", func(ca *servingcerttest.CA, _ *servingcert.Options) error {
			return ca.AddRequest(request(svc, certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc}))
		}},
		{"CreateIfMissing", func(_ *servingcerttest.CA, o *servingcert.Options) error {
			o.CreateIfMissing = &certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc}
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := newCA(t, servingcerttest.Options{})
			ca.Fail(apierrors.NewServiceUnavailable("certapi is down for this test"))
			o := servingcert.Options{Issuer: ca, Namespace: ns, Name: svc, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
			if err := tc.setup(ca, &o); err != nil {
				t.Fatal(err)
			}
			src := startSource(t, o)
			eventually(t, "a failed attempt to show in Checker", func() bool {
				err := src.Checker()(nil)
				return err != nil && strings.Contains(err.Error(), "certapi is down for this test")
			})
			if src.Ready() {
				t.Fatal("Ready while every issuance fails")
			}
			if _, err := src.GetCertificate(nil); !errors.Is(err, servingcert.ErrNoCertificate) {
				t.Fatalf("GetCertificate: %v, want ErrNoCertificate", err)
			}
			ca.Fail(nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := src.WaitReady(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := handshake(t, src, ca.CABundle()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// One fake clock for the CA and the Source: renewal is tested without waiting for it.
func TestRenewalOnAFakeClock(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Now().Truncate(time.Second))
	ca := newCA(t, servingcerttest.Options{Clock: clk})
	if err := ca.AddRequest(request(svc, certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc, Duration: hours(1)})); err != nil {
		t.Fatal(err)
	}
	src := startSource(t, servingcert.Options{Issuer: ca, Namespace: ns, Name: svc, Clock: clk, DisableCAWatch: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := src.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 2; i <= 3; i++ {
		// The Source waits until the certificate's renewal time (40 minutes in, less jitter).
		eventually(t, "the Source to wait for its renewal time", clk.HasWaiters)
		clk.Step(40 * time.Minute)
		eventually(t, "a renewal", func() bool { return len(ca.Issued()) == i })
		eventually(t, "the renewed certificate to be served", func() bool {
			c, err := src.GetCertificate(nil)
			return err == nil && c.Leaf.Equal(ca.Issued()[i-1])
		})
	}
}
