package signer

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"time"
)

// SelfSigned reports whether ca is a CA certapi made itself (NewCA): no
// chain above its certificate.
func (ca *CA) SelfSigned() bool {
	return len(ca.Chain) == 0
}

// Root returns ca's trust anchor: the last certificate of its Chain (the
// organisation's root, or the certificate the operator gave as the anchor),
// or ca's own certificate when it is self-signed.
func (ca *CA) Root() *x509.Certificate {
	if len(ca.Chain) == 0 {
		return ca.Certificate
	}
	return ca.Chain[len(ca.Chain)-1]
}

// ServedChain returns the CA certificates a server presents after a leaf that
// ca signed, in order. For a self-signed CA it is nil: the leaf is served
// alone, as it always was, and clients trust the CA through the bundle. For
// an intermediate it is ca's certificate, then every certificate of Chain
// but the anchor when the anchor is self-signed (a client that trusts the
// root has it; RFC 8446 section 4.4.2 lets a server leave it out). Served
// so, a leaf verifies for a client that trusts the root only, and for one
// that trusts ca's certificate only (see BundleAnchor).
func (ca *CA) ServedChain() []*x509.Certificate {
	if len(ca.Chain) == 0 {
		return nil
	}
	above := ca.Chain
	if selfSigned(above[len(above)-1]) {
		above = above[:len(above)-1]
	}
	out := make([]*x509.Certificate, 0, 1+len(above))
	out = append(out, ca.Certificate)
	return append(out, above...)
}

// ChainPEM returns Chain as a PEM bundle, to be stored beside the CA's
// certificate and read back with WithChain; nil for a self-signed CA.
func (ca *CA) ChainPEM() []byte {
	if len(ca.Chain) == 0 {
		return nil
	}
	return EncodeBundle(ca.Chain...)
}

// ChainNotAfter is the earliest notAfter of ca's certificate and its Chain:
// no certificate verified through that chain is valid after it, so no leaf
// ca signs outlives it. For a self-signed CA it is the certificate's
// notAfter.
func (ca *CA) ChainNotAfter() time.Time {
	end := ca.Certificate.NotAfter
	for _, c := range ca.Chain {
		if c.NotAfter.Before(end) {
			end = c.NotAfter
		}
	}
	return end
}

// WithChain returns a copy of ca carrying the chain parsed from chainPEM (as
// ChainPEM writes it), for a CA read back from storage. It checks only that
// each certificate is a CA that signed the one before it (the first one
// signed ca's certificate), not times or name constraints: a stored CA loads
// as it was imported (CheckIntermediate checked the rest then), and whether
// it is still good enough is for the rotation to judge. An empty chainPEM
// gives a copy with no chain (a self-signed CA).
func (ca *CA) WithChain(chainPEM []byte) (*CA, error) {
	out := &CA{Certificate: ca.Certificate, Key: ca.Key}
	if len(bytes.TrimSpace(chainPEM)) == 0 {
		return out, nil
	}
	chain, err := ParseBundle(chainPEM)
	if err != nil {
		return nil, fmt.Errorf("loading CA chain: %w", err)
	}
	if len(chain) > MaxChainLength {
		return nil, fmt.Errorf("loading CA chain: %d certificates; accepted: at most %d", len(chain), MaxChainLength)
	}
	below := ca.Certificate
	for i, c := range chain {
		if err := below.CheckSignatureFrom(c); err != nil {
			return nil, fmt.Errorf("loading CA chain: certificate %d (%s) did not sign %s: %s", i+1, describeCert(c), describeCert(below), shortError(err))
		}
		below = c
	}
	out.Chain = chain
	return out, nil
}

// MaxChainLength is the most certificates a chain above a CA may hold
// (CheckIntermediate, WithChain). Real hierarchies are two or three deep;
// the bound keeps a hostile input from costing many signature checks.
const MaxChainLength = 8

// selfSigned reports whether c is issued by its own subject with its own
// key: a root.
func selfSigned(c *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, c.RawSubject) && c.CheckSignature(c.SignatureAlgorithm, c.RawTBSCertificate, c.Signature) == nil
}

// describeCert names a certificate in messages by its subject and serial
// number, never by anything secret.
func describeCert(c *x509.Certificate) string {
	subject := c.Subject.String()
	if subject == "" {
		subject = "an empty subject"
	}
	return fmt.Sprintf("%q (serial %s)", truncateLong(subject), FormatSerialNumber(c.SerialNumber))
}

// truncateLong shortens a subject quoted in a message; subjects are longer
// than the names truncate is made for.
func truncateLong(s string) string {
	const limit = 120
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
