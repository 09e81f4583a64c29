package signer

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// EncodeBundle returns a PEM bundle of certs: one CERTIFICATE block each, in
// the order given, without duplicates (compared by raw DER; the first
// occurrence is kept) and skipping nil entries. The same input always gives
// the same bytes, so a caller can compare bundles byte for byte and write a
// caBundle only when it really changed: every caBundle change on a CRD
// restarts that CRD's storage and drops its watches.
func EncodeBundle(certs ...*x509.Certificate) []byte {
	var buf bytes.Buffer
	seen := make(map[string]struct{}, len(certs))
	for _, c := range certs {
		if c == nil {
			continue
		}
		if _, dup := seen[string(c.Raw)]; dup {
			continue
		}
		seen[string(c.Raw)] = struct{}{}
		// Writing to a bytes.Buffer cannot fail.
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

// ParseBundle parses a PEM bundle of one or more CERTIFICATE blocks, in
// order. Text between blocks (such as the comments in distribution CA files)
// is ignored, but a block of another type, a damaged block or a certificate
// that does not parse is an error, so that a truncated or corrupted bundle
// is never silently shortened. An input with no certificate is an error.
func ParseBundle(pemBytes []byte) ([]*x509.Certificate, error) {
	const expect = "expected PEM blocks of type CERTIFICATE"
	begin := []byte("-----BEGIN ")
	var certs []*x509.Certificate
	rest := pemBytes
	for {
		i := bytes.Index(rest, begin)
		if i < 0 {
			break
		}
		rest = rest[i:]
		block, after := pem.Decode(rest)
		// pem.Decode skips a block it cannot parse and returns the next one;
		// a consumed span with more than one BEGIN line means that happened.
		if block == nil || bytes.Count(rest[:len(rest)-len(after)], begin) != 1 {
			return nil, fmt.Errorf("parsing certificate bundle: malformed PEM block %d; %s", len(certs)+1, expect)
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("parsing certificate bundle: block %d has type %q; %s", len(certs)+1, truncate(block.Type), expect)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parsing certificate bundle: certificate %d: %s", len(certs)+1, shortError(err))
		}
		certs = append(certs, cert)
		rest = after
	}
	if len(certs) == 0 {
		return nil, errors.New("parsing certificate bundle: no certificate found; " + expect)
	}
	return certs, nil
}
