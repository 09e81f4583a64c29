// Package servedcert checks what a TLS server actually serves, the way kube-apiserver would see it: Probe
// does a TLS handshake only (no request byte is ever sent) and returns the chain the server presented,
// and Classify decides, as a pure function of that chain, the CA bundle an object holds, the server name
// kube-apiserver dials (<service>.<namespace>.svc) and the time, whether kube-apiserver would accept it.
// It has no Kubernetes client: the leader's controller (pkg/controller/servedcert) finds what to probe.
package servedcert

import (
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// State is what one endpoint serves, as kube-apiserver would judge it.
type State string

// States, from best to worst as Worse orders them.
const (
	// Verified: the presented chain verifies against the bundle, for the server name, and the leaf is not
	// within the renew window of its notAfter.
	Verified State = "Verified"
	// ExpiringSoon: it verifies, but the leaf expires within the renew window: a server that never
	// reloads its certificate is about to fail.
	ExpiringSoon State = "ExpiringSoon"
	// NoEndpoints: the Service has no ready endpoint serving the port; kube-apiserver has nothing to call.
	NoEndpoints State = "NoEndpoints"
	// Unreachable: the TCP connection failed (refused, timed out, reset, no route), as a NetworkPolicy
	// that forbids certapi's egress makes it. Never a trust failure: certapi does not know what is served.
	Unreachable State = "Unreachable"
	// HandshakeFailed: a connection was made but no TLS handshake completed (the port speaks plain HTTP,
	// or the server refused the handshake with an alert): kube-apiserver fails the same way.
	HandshakeFailed State = "HandshakeFailed"
	// NameMismatch: the chain verifies, but the leaf is not valid for the server name kube-apiserver
	// checks (<service>.<namespace>.svc).
	NameMismatch State = "NameMismatch"
	// Expired: the leaf (or a CA of its chain) is outside its validity period now.
	Expired State = "Expired"
	// Untrusted: no CA of the bundle verifies the chain; kube-apiserver fails with "x509: certificate
	// signed by unknown authority".
	Untrusted State = "Untrusted"
)

// States lists every state, best first; the metrics report one series per state.
var States = []State{Verified, ExpiringSoon, NoEndpoints, Unreachable, HandshakeFailed, NameMismatch, Expired, Untrusted}

// Failing reports whether kube-apiserver's call would fail in state s now. ExpiringSoon still succeeds;
// NoEndpoints and Unreachable fail too, but for no reason a certificate can fix.
func (s State) Failing() bool {
	switch s {
	case Verified, ExpiringSoon:
		return false
	}
	return true
}

// Worse reports whether a is a worse finding than b, for choosing the worst endpoints to name: trust and
// name failures first (a certificate problem, which is certapi's to report), then the network ones.
func Worse(a, b State) bool {
	return slices.Index(States, a) > slices.Index(States, b)
}

// Result is one endpoint's classification.
type Result struct {
	State State
	// Message says what was found, in words an admin can act on. It never holds key material.
	Message string
	// IssuerSerial is the serial (lower-case hex, as certapi's status writes serials) of the CA that
	// signed the leaf: for Verified, ExpiringSoon, NameMismatch and Expired, the bundle's CA that verifies
	// the chain; for Untrusted, the issuing certificate the server presented, when it presented one.
	IssuerSerial string
	// Issuer is the leaf's issuer distinguished name (Untrusted says which CA signed it).
	Issuer string
	// NotAfter is the leaf's notAfter; zero when no certificate was presented.
	NotAfter time.Time
	// Expected are the serials of the bundle's CAs (Untrusted says which bundle was expected).
	Expected []string
}

// Classify decides what kube-apiserver would make of chain (the certificates a server presented, leaf
// first) when it dials serverName with bundle as its caBundle, at now. A leaf that verifies but whose
// notAfter is within renewWindow of now is ExpiringSoon; renewWindow 0 means DefaultRenewWindow. The order of the findings is fixed: Untrusted,
// then Expired, then NameMismatch, then ExpiringSoon; trust is judged apart from time, so an expired
// leaf of a foreign CA is Untrusted, not Expired.
func Classify(chain, bundle []*x509.Certificate, serverName string, now time.Time, renewWindow time.Duration) Result {
	expected := serials(bundle)
	if len(chain) == 0 || chain[0] == nil {
		return Result{State: Untrusted, Expected: expected, Message: "the server presented no certificate"}
	}
	leaf := chain[0]
	res := Result{Issuer: leaf.Issuer.String(), NotAfter: leaf.NotAfter, Expected: expected}
	if len(bundle) == 0 {
		res.State = Untrusted
		res.Message = "the object holds no CA certificate to verify the server's certificate with"
		return res
	}
	roots := x509.NewCertPool()
	for _, c := range bundle {
		roots.AddCert(c)
	}
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: intermediates, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}

	// Trust, apart from time: verify at a moment the leaf is valid.
	opts.CurrentTime = now
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		opts.CurrentTime = leaf.NotAfter
		if now.Before(leaf.NotBefore) {
			opts.CurrentTime = leaf.NotBefore
		}
	}
	chains, err := leaf.Verify(opts)
	if err != nil {
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			// A CA of the bundle is not valid then: the bundle still names it, so it is a time problem.
			res.State = Expired
			res.Message = fmt.Sprintf("a CA certificate of the chain is not valid at %s: %v", opts.CurrentTime.UTC().Format(time.RFC3339), err)
			return res
		}
		res.State = Untrusted
		res.IssuerSerial = presentedIssuerSerial(leaf, chain[1:])
		res.Message = untrustedMessage(leaf, res.IssuerSerial, expected, err)
		return res
	}
	// The CA that signed the leaf: the bundle's anchor for a self-signed CA, the intermediate served with
	// the leaf when the bundle carries an organisation's root (--ca-bundle-anchor=Root). Rotation and
	// distrust look endpoints up by the serial of certapi's own CA, never the root's.
	res.IssuerSerial = signer.FormatSerialNumber(chains[0][1].SerialNumber)

	// Time, now.
	if !opts.CurrentTime.Equal(now) {
		res.State = Expired
		if now.Before(leaf.NotBefore) {
			res.Message = fmt.Sprintf("the server's certificate is not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339))
		} else {
			res.Message = fmt.Sprintf("the server's certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
		}
		return res
	}
	if err := leaf.VerifyHostname(serverName); err != nil {
		res.State = NameMismatch
		res.Message = fmt.Sprintf("the server's certificate is for %s, not for %s, the name kube-apiserver checks", names(leaf), serverName)
		return res
	}
	if renewWindow <= 0 {
		renewWindow = DefaultRenewWindow(leaf)
	}
	if left := leaf.NotAfter.Sub(now); left < renewWindow {
		res.State = ExpiringSoon
		res.Message = fmt.Sprintf("the server's certificate (signed by the CA %s) expires at %s, in %s",
			res.IssuerSerial, leaf.NotAfter.UTC().Format(time.RFC3339), left.Round(time.Second))
		return res
	}
	res.State = Verified
	res.Message = fmt.Sprintf("the server's certificate is signed by the CA %s and valid until %s", res.IssuerSerial, leaf.NotAfter.UTC().Format(time.RFC3339))
	return res
}

// DefaultRenewWindow is a sixth of leaf's lifetime: certapi renews with a third of it left (its
// default renewal time), so a server still presenting the leaf with less than a sixth left has missed
// its renewal by half the margin and most likely never reloads its certificate.
func DefaultRenewWindow(leaf *x509.Certificate) time.Duration {
	return leaf.NotAfter.Sub(leaf.NotBefore) / 6
}

// NoEndpointsResult is the result of a Service with nothing to probe; why says what is missing.
func NoEndpointsResult(why string) Result {
	return Result{State: NoEndpoints, Message: why}
}

// presentedIssuerSerial is the serial of the certificate in presented that issued leaf, when the server
// sent it; "" otherwise.
func presentedIssuerSerial(leaf *x509.Certificate, presented []*x509.Certificate) string {
	for _, c := range presented {
		if leaf.CheckSignatureFrom(c) == nil {
			return signer.FormatSerialNumber(c.SerialNumber)
		}
	}
	return ""
}

// untrustedMessage says which CA signed leaf and which bundle was expected.
func untrustedMessage(leaf *x509.Certificate, issuerSerial string, expected []string, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "the server's certificate is signed by %q", leaf.Issuer.String())
	switch {
	case issuerSerial != "":
		fmt.Fprintf(&b, " (CA serial %s)", issuerSerial)
	case len(leaf.AuthorityKeyId) > 0:
		fmt.Fprintf(&b, " (CA subject key id %s)", hex.EncodeToString(leaf.AuthorityKeyId))
	}
	fmt.Fprintf(&b, " and valid until %s, which the object's caBundle (CAs %s) does not verify", leaf.NotAfter.UTC().Format(time.RFC3339), strings.Join(expected, ", "))
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		fmt.Fprintf(&b, ": %v", err)
	}
	return b.String()
}

// serials lists the serials of cas in order.
func serials(cas []*x509.Certificate) []string {
	out := make([]string, 0, len(cas))
	for _, c := range cas {
		out = append(out, signer.FormatSerialNumber(c.SerialNumber))
	}
	return out
}

// names says which names leaf is valid for.
func names(leaf *x509.Certificate) string {
	var n []string
	n = append(n, leaf.DNSNames...)
	for _, ip := range leaf.IPAddresses {
		n = append(n, ip.String())
	}
	if len(n) == 0 {
		return "no DNS name or IP address (subject " + leaf.Subject.String() + ")"
	}
	return strings.Join(n, ", ")
}
