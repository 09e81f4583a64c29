package signer

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// MaxCSRBytes is the largest PEM certificate request ParseCSR looks at. A
// real request is well under 8 KiB (an RSA 8192 request is about 2.5 KiB of
// PEM); the limit is checked before any parsing.
const MaxCSRBytes = 64 << 10

// ErrInvalidCSR is wrapped by every error ParseCSR returns, so that the API
// layer can answer with a validation error (HTTP 422) using errors.Is. Errors
// about the request's key wrap ErrUnsupportedKey as well.
var ErrInvalidCSR = errors.New("invalid certificate request")

// csrExpect is the "what is accepted" part of ParseCSR's format errors.
const csrExpect = "expected exactly one PEM block of type CERTIFICATE REQUEST (PKCS#10)"

// ParseCSR parses and checks the PKCS#10 request of a servingcerts create.
//
// The input must be at most MaxCSRBytes (checked before parsing) and hold
// exactly one PEM block of type "CERTIFICATE REQUEST" (or the older "NEW
// CERTIFICATE REQUEST"), with nothing but whitespace around it. The request's
// public key must pass CheckPublicKey and its self-signature must verify,
// which proves the caller holds the private key. The key is checked before
// the signature so that an unsupported or oversized key is refused without
// doing any public-key arithmetic on it.
//
// Callers use only the public key: the request's subject, SANs and other
// attributes are ignored, because identity comes from the ServingCertRequest.
func ParseCSR(pemBytes []byte) (*x509.CertificateRequest, error) {
	if len(pemBytes) > MaxCSRBytes {
		return nil, fmt.Errorf("%w: %d bytes; accepted: at most %d bytes", ErrInvalidCSR, len(pemBytes), MaxCSRBytes)
	}
	trimmed := bytes.TrimSpace(pemBytes)
	if len(trimmed) == 0 {
		return nil, fmt.Errorf("%w: empty; %s", ErrInvalidCSR, csrExpect)
	}
	if !bytes.HasPrefix(trimmed, []byte("-----BEGIN ")) {
		return nil, fmt.Errorf("%w: not PEM; %s", ErrInvalidCSR, csrExpect)
	}
	// pem.Decode skips anything it cannot parse, including a damaged block;
	// counting BEGIN lines catches a second (or a skipped) block.
	if n := bytes.Count(trimmed, []byte("-----BEGIN ")); n != 1 {
		return nil, fmt.Errorf("%w: %d PEM blocks; %s", ErrInvalidCSR, n, csrExpect)
	}
	block, rest := pem.Decode(trimmed)
	if block == nil {
		return nil, fmt.Errorf("%w: malformed PEM; %s", ErrInvalidCSR, csrExpect)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%w: data after the PEM block; %s", ErrInvalidCSR, csrExpect)
	}
	if block.Type != "CERTIFICATE REQUEST" && block.Type != "NEW CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("%w: PEM block type %q; %s", ErrInvalidCSR, truncate(block.Type), csrExpect)
	}
	if len(block.Headers) != 0 {
		return nil, fmt.Errorf("%w: PEM headers are not allowed; %s", ErrInvalidCSR, csrExpect)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed PKCS#10 (%s); %s", ErrInvalidCSR, shortError(err), csrExpect)
	}
	if err := CheckPublicKey(csr.PublicKey); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature does not verify (%s); expected a request signed with the private key of its public key",
			ErrInvalidCSR, shortError(err))
	}
	return csr, nil
}

// shortError keeps a library error readable in an API response: the ASN.1
// decoder's messages end in a long dump of struct tags, which is cut off at
// its opening parenthesis.
func shortError(err error) string {
	const limit = 80
	s := err.Error()
	if i := strings.IndexAny(s, "({"); i > 0 {
		s = strings.TrimSpace(s[:i])
	}
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return s
}
