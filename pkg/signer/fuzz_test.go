package signer

import (
	"bytes"
	"crypto"
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

// FuzzCheckIntermediate checks that CheckIntermediate never panics on any
// certificate or chain PEM, that every refusal is an *IntermediateError whose
// findings each have a reason and a message, and that whatever it accepts is
// a CA for the key whose chain links verify.
func FuzzCheckIntermediate(f *testing.F) {
	key := testKey(f, string(ECDSAP256))
	csr := intermediateCSR(f, key)
	root := newTestRoot(f, "Fuzz Root", "P256", nil)
	org := root.subCA(f, "Fuzz Org", nil)
	good := root.signCSR(f, csr, nil)
	deep := org.signCSR(f, csr, nil)
	f.Add(bundleOf(good), bundleOf(root.cert))
	f.Add(bundleOf(good, root.cert), []byte{})
	f.Add(bundleOf(deep), bundleOf(root.cert, org.cert))
	f.Add(bundleOf(deep, org.cert), bundleOf(deep))
	f.Add(bundleOf(root.cert), bundleOf(good))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"), []byte("junk"))
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, certPEM, chainPEM []byte) {
		ca, warnings, err := CheckIntermediate(certPEM, chainPEM, key, importOpts())
		if err != nil {
			var ie *IntermediateError
			if !errors.As(err, &ie) || !errors.Is(err, ErrIntermediateRefused) {
				t.Fatalf("error %q (%T) is not an *IntermediateError", err, err)
			}
			if len(ie.Problems) == 0 {
				t.Fatal("a refusal without problems")
			}
			for _, p := range append(ie.Problems, ie.Warnings...) {
				if p.Reason == "" || p.Message == "" {
					t.Fatalf("a finding without reason or message: %+v", p)
				}
			}
			if ca != nil || warnings != nil {
				t.Fatal("a CA or warnings came back with an error")
			}
			return
		}
		if !ca.Certificate.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(key.Public()) {
			t.Fatal("accepted a certificate for another key")
		}
		if len(ca.Chain) == 0 {
			t.Fatal("accepted a certificate with no chain")
		}
		below := ca.Certificate
		for _, c := range ca.Chain {
			if err := below.CheckSignatureFrom(c); err != nil {
				t.Fatalf("accepted a chain whose link does not verify: %v", err)
			}
			below = c
		}
	})
}
