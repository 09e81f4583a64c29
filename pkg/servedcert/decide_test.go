package servedcert

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

func TestClassify(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	year := 365 * 24 * time.Hour
	const name = "webhook.tenant.svc"
	active := newCA(t, "certapi active", now.Add(-year), now.Add(year))
	next := newCA(t, "certapi next", now.Add(-time.Hour), now.Add(2*year))
	other := newCA(t, "someone else", now.Add(-year), now.Add(year))
	expiredCA := newCA(t, "expired CA", now.Add(-2*year), now.Add(-time.Hour))
	serial := func(ca *testCA) string { return signer.FormatSerialNumber(ca.cert.SerialNumber) }

	good, _ := active.leaf(t, []string{name, name + ".cluster.local"}, now.Add(-time.Hour), now.Add(7*24*time.Hour))
	ofNext, _ := next.leaf(t, []string{name}, now.Add(-time.Hour), now.Add(7*24*time.Hour))
	foreign, _ := other.leaf(t, []string{name}, now.Add(-time.Hour), now.Add(7*24*time.Hour))
	foreignExpired, _ := other.leaf(t, []string{name}, now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	wrongName, _ := active.leaf(t, []string{"other.tenant.svc"}, now.Add(-time.Hour), now.Add(7*24*time.Hour))
	expired, _ := active.leaf(t, []string{name}, now.Add(-48*time.Hour), now.Add(-time.Minute))
	notYet, _ := active.leaf(t, []string{name}, now.Add(time.Hour), now.Add(48*time.Hour))
	soon, _ := active.leaf(t, []string{name}, now.Add(-time.Hour), now.Add(30*time.Minute))
	soonDefault, _ := active.leaf(t, []string{name}, now.Add(-50*time.Hour), now.Add(9*time.Hour)) // 9h of 59h left
	clientOnly, _ := active.leaf(t, []string{name}, now.Add(-time.Hour), now.Add(48*time.Hour), x509.ExtKeyUsageClientAuth)
	ofExpiredCA, _ := expiredCA.leaf(t, []string{name}, now.Add(-48*time.Hour), now.Add(48*time.Hour))

	bundle := []*x509.Certificate{active.cert, next.cert}
	for _, tc := range []struct {
		name         string
		chain        []*x509.Certificate
		bundle       []*x509.Certificate
		want         State
		issuerSerial string
		inMessage    string
		// window is the renew window; an hour when 0, the default (0) when negative.
		window time.Duration
	}{
		{name: "verified by the Active CA", chain: []*x509.Certificate{good}, bundle: bundle, want: Verified, issuerSerial: serial(active)},
		{name: "verified by the Next CA", chain: []*x509.Certificate{ofNext}, bundle: bundle, want: Verified, issuerSerial: serial(next)},
		{name: "a presented CA does not make it trusted", chain: []*x509.Certificate{foreign, other.cert}, bundle: bundle, want: Untrusted,
			issuerSerial: serial(other), inMessage: "someone else"},
		{name: "untrusted names the expected bundle", chain: []*x509.Certificate{foreign}, bundle: bundle, want: Untrusted,
			inMessage: serial(active) + ", " + serial(next)},
		{name: "untrusted and expired is untrusted", chain: []*x509.Certificate{foreignExpired}, bundle: bundle, want: Untrusted},
		{name: "a bundle without the signing CA", chain: []*x509.Certificate{ofNext}, bundle: []*x509.Certificate{active.cert}, want: Untrusted},
		{name: "wrong name", chain: []*x509.Certificate{wrongName}, bundle: bundle, want: NameMismatch, issuerSerial: serial(active),
			inMessage: "other.tenant.svc, not for " + name},
		{name: "expired", chain: []*x509.Certificate{expired}, bundle: bundle, want: Expired, issuerSerial: serial(active), inMessage: "expired at"},
		{name: "not yet valid", chain: []*x509.Certificate{notYet}, bundle: bundle, want: Expired, inMessage: "not valid before"},
		{name: "expires within the renew window", chain: []*x509.Certificate{soon}, bundle: bundle, want: ExpiringSoon, issuerSerial: serial(active)},
		{name: "client-only usage", chain: []*x509.Certificate{clientOnly}, bundle: bundle, want: Untrusted},
		{name: "the CA in the bundle expired", chain: []*x509.Certificate{ofExpiredCA}, bundle: []*x509.Certificate{expiredCA.cert}, want: Expired},
		{name: "within the default window, a sixth of its lifetime", chain: []*x509.Certificate{soonDefault}, bundle: bundle, want: ExpiringSoon, window: -1},
		{name: "outside the default window", chain: []*x509.Certificate{good}, bundle: bundle, want: Verified, window: -1},
		{name: "no certificate", chain: nil, bundle: bundle, want: Untrusted, inMessage: "no certificate"},
		{name: "empty bundle", chain: []*x509.Certificate{good}, bundle: nil, want: Untrusted, inMessage: "holds no CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			window := time.Hour
			if tc.window < 0 {
				window = 0
			}
			got := Classify(tc.chain, tc.bundle, name, now, window)
			if got.State != tc.want {
				t.Fatalf("state %s, want %s (%s)", got.State, tc.want, got.Message)
			}
			if tc.issuerSerial != "" && got.IssuerSerial != tc.issuerSerial {
				t.Errorf("issuer serial %q, want %q", got.IssuerSerial, tc.issuerSerial)
			}
			if !strings.Contains(got.Message, tc.inMessage) {
				t.Errorf("message %q does not say %q", got.Message, tc.inMessage)
			}
			if got.Message == "" {
				t.Error("no message")
			}
			if len(tc.chain) > 0 && !got.NotAfter.Equal(tc.chain[0].NotAfter) {
				t.Errorf("notAfter %s, want the leaf's %s", got.NotAfter, tc.chain[0].NotAfter)
			}
			if got.State == Untrusted && len(tc.bundle) > 0 && !slices.Equal(got.Expected, serials(tc.bundle)) {
				t.Errorf("expected %v, want the bundle's %v", got.Expected, serials(tc.bundle))
			}
		})
	}
}

func TestWorseAndFailing(t *testing.T) {
	for _, tc := range []struct {
		a, b  State
		worse bool
	}{
		{Untrusted, Verified, true},
		{Verified, Untrusted, false},
		{Untrusted, Unreachable, true},
		{NameMismatch, NoEndpoints, true},
		{ExpiringSoon, Verified, true},
		{Verified, Verified, false},
	} {
		if got := Worse(tc.a, tc.b); got != tc.worse {
			t.Errorf("Worse(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.worse)
		}
	}
	for _, s := range States {
		want := s != Verified && s != ExpiringSoon
		if s.Failing() != want {
			t.Errorf("%s.Failing() = %v, want %v", s, s.Failing(), want)
		}
	}
}
