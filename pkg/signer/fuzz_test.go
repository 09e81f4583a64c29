package signer

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzParseCSR checks that ParseCSR never panics and that whatever it
// accepts really is a supported key with a valid self-signature, and that
// every refusal is an ErrInvalidCSR.
func FuzzParseCSR(f *testing.F) {
	for _, kind := range []string{string(ECDSAP256), string(ECDSAP384), string(RSA2048), keyP521, keyEd25519} {
		f.Add(csrPEM(f, testKey(f, kind)))
	}
	valid := csrPEM(f, testKey(f, string(ECDSAP256)))
	f.Add(bytes.Replace(valid, []byte("CERTIFICATE REQUEST"), []byte("NEW CERTIFICATE REQUEST"), 2))
	f.Add(append(bytes.Clone(valid), valid...))
	f.Add([]byte("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		csr, err := ParseCSR(in)
		if err != nil {
			if !errors.Is(err, ErrInvalidCSR) {
				t.Fatalf("error %q does not wrap ErrInvalidCSR", err)
			}
			if csr != nil {
				t.Fatal("ParseCSR returned a request with an error")
			}
			return
		}
		if err := CheckPublicKey(csr.PublicKey); err != nil {
			t.Fatalf("accepted a CSR with an unsupported key: %v", err)
		}
		if err := csr.CheckSignature(); err != nil {
			t.Fatalf("accepted a CSR whose signature does not verify: %v", err)
		}
	})
}

// FuzzParseBundle checks that ParseBundle never panics and that a bundle it
// accepts survives an EncodeBundle/ParseBundle round trip.
func FuzzParseBundle(f *testing.F) {
	a := newTestCA(f, testNow, 0)
	b := newTestCA(f, testNow, 0)
	f.Add(a.CertificatePEM())
	f.Add(EncodeBundle(a.Certificate, b.Certificate))
	f.Add(append([]byte("# comment\n"), EncodeBundle(b.Certificate)...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		certs, err := ParseBundle(in)
		if err != nil {
			return
		}
		if len(certs) == 0 {
			t.Fatal("ParseBundle returned no certificates and no error")
		}
		again, err := ParseBundle(EncodeBundle(certs...))
		if err != nil {
			t.Fatalf("re-parsing an encoded bundle: %v", err)
		}
		if len(again) > len(certs) {
			t.Fatalf("round trip grew the bundle from %d to %d", len(certs), len(again))
		}
	})
}
