package signer

import (
	"bytes"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
)

func TestParseCSR(t *testing.T) {
	p256 := csrPEM(t, testKey(t, string(ECDSAP256)))
	p384 := csrPEM(t, testKey(t, string(ECDSAP384)))
	rsa2048 := csrPEM(t, testKey(t, string(RSA2048)))
	block, _ := pem.Decode(p256)
	reencode := func(typ string, der []byte, headers map[string]string) []byte {
		return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der, Headers: headers})
	}
	tampered := bytes.Clone(block.Bytes)
	tampered[len(tampered)-1] ^= 0x01 // last byte of the signature

	const (
		format   = "expected exactly one PEM block of type CERTIFICATE REQUEST (PKCS#10)"
		accepted = "accepted: RSA with 2048 to 8192 bits, ECDSA P-256 or P-384"
	)
	tests := []struct {
		name       string
		in         []byte
		wantErr    string // substring; empty means valid
		wantKeyErr bool   // the error must also wrap ErrUnsupportedKey
	}{
		{name: "ECDSA P-256", in: p256},
		{name: "ECDSA P-384", in: p384},
		{name: "RSA 2048", in: rsa2048},
		{name: "NEW CERTIFICATE REQUEST", in: reencode("NEW CERTIFICATE REQUEST", block.Bytes, nil)},
		{name: "surrounding whitespace", in: append(append([]byte("\n  \r\n"), p256...), "\n\n\t "...)},

		{name: "empty", in: nil, wantErr: "invalid certificate request: empty; " + format},
		{name: "whitespace only", in: []byte(" \n\t"), wantErr: "invalid certificate request: empty; " + format},
		{name: "not PEM", in: []byte("hello"), wantErr: "invalid certificate request: not PEM; " + format},
		{name: "raw DER", in: block.Bytes, wantErr: "not PEM; " + format},
		{name: "leading text", in: append([]byte("Certificate Request:\n"), p256...), wantErr: "not PEM; " + format},
		{name: "malformed PEM", in: []byte("-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n"), wantErr: "invalid certificate request: malformed PEM; " + format},
		{name: "bad base64", in: []byte("-----BEGIN CERTIFICATE REQUEST-----\n!!!!\n-----END CERTIFICATE REQUEST-----\n"), wantErr: "malformed PEM; " + format},
		{name: "wrong block type", in: reencode("CERTIFICATE", block.Bytes, nil), wantErr: `invalid certificate request: PEM block type "CERTIFICATE"; ` + format},
		{name: "private key block", in: reencode("PRIVATE KEY", []byte{1}, nil), wantErr: `PEM block type "PRIVATE KEY"; ` + format},
		{name: "trailing garbage", in: append(bytes.Clone(p256), "garbage"...), wantErr: "invalid certificate request: data after the PEM block; " + format},
		{name: "two blocks", in: append(bytes.Clone(p256), p384...), wantErr: "invalid certificate request: 2 PEM blocks; " + format},
		{name: "PEM headers", in: reencode("CERTIFICATE REQUEST", block.Bytes, map[string]string{"Proc-Type": "4,ENCRYPTED"}), wantErr: "PEM headers are not allowed; " + format},
		{name: "garbage DER", in: reencode("CERTIFICATE REQUEST", []byte{0x30, 0x03, 0x02, 0x01, 0x01}, nil), wantErr: "invalid certificate request: malformed PKCS#10 (asn1: structure error: tags don't match); " + format},
		{name: "DER with trailing data", in: reencode("CERTIFICATE REQUEST", append(bytes.Clone(block.Bytes), 0), nil), wantErr: "malformed PKCS#10 (asn1: syntax error: trailing data); " + format},
		{name: "tampered signature", in: reencode("CERTIFICATE REQUEST", tampered, nil),
			wantErr: "invalid certificate request: signature does not verify (x509: ECDSA verification failure); expected a request signed with the private key of its public key"},
		{name: "RSA 1024", in: csrPEM(t, testKey(t, keyRSA1024)), wantErr: "invalid certificate request: unsupported key: RSA 1024 bits; " + accepted, wantKeyErr: true},
		{name: "ECDSA P-224", in: csrPEM(t, testKey(t, keyP224)), wantErr: "invalid certificate request: unsupported key: ECDSA P-224; " + accepted, wantKeyErr: true},
		{name: "ECDSA P-521", in: csrPEM(t, testKey(t, keyP521)), wantErr: "invalid certificate request: unsupported key: ECDSA P-521; " + accepted, wantKeyErr: true},
		{name: "Ed25519", in: csrPEM(t, testKey(t, keyEd25519)), wantErr: "invalid certificate request: unsupported key: Ed25519; " + accepted, wantKeyErr: true},
		{name: "over 64 KiB", in: append(bytes.Clone(p256), bytes.Repeat([]byte("\n"), MaxCSRBytes)...),
			wantErr: "bytes; accepted: at most 65536 bytes"},
		{name: "over 64 KiB of anything", in: bytes.Repeat([]byte("A"), MaxCSRBytes+1), wantErr: "invalid certificate request: 65537 bytes; accepted: at most 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			csr, err := ParseCSR(tt.in)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseCSR: %v", err)
				}
				if err := CheckPublicKey(csr.PublicKey); err != nil {
					t.Fatalf("accepted CSR has an unsupported key: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseCSR accepted the input, want error containing %q", tt.wantErr)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.wantErr) {
				t.Fatalf("error %q does not contain %q", msg, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidCSR) {
				t.Errorf("error %q does not wrap ErrInvalidCSR", msg)
			}
			if tt.wantKeyErr != errors.Is(err, ErrUnsupportedKey) {
				t.Errorf("errors.Is(err, ErrUnsupportedKey)=%v, want %v", !tt.wantKeyErr, tt.wantKeyErr)
			}
			// Short, and never echoing the input.
			if len(msg) > 250 {
				t.Errorf("error is %d characters long: %q", len(msg), msg)
			}
			if strings.Contains(msg, "MII") {
				t.Errorf("error echoes base64 input: %q", msg)
			}
			if !strings.Contains(msg, "accepted") && !strings.Contains(msg, "expected") {
				t.Errorf("error does not say what is accepted: %q", msg)
			}
		})
	}
}
