package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"testing"
)

func TestGenerateKey(t *testing.T) {
	tests := []struct {
		alg       KeyAlgorithm
		wantCurve elliptic.Curve
		wantBits  int
	}{
		{alg: ECDSAP256, wantCurve: elliptic.P256()},
		{alg: ECDSAP384, wantCurve: elliptic.P384()},
		{alg: RSA2048, wantBits: 2048},
		{alg: RSA3072, wantBits: 3072},
		{alg: RSA4096, wantBits: 4096},
	}
	if len(tests) != len(SupportedKeyAlgorithms()) {
		t.Fatalf("test table covers %d algorithms, SupportedKeyAlgorithms has %d", len(tests), len(SupportedKeyAlgorithms()))
	}
	for _, tt := range tests {
		t.Run(string(tt.alg), func(t *testing.T) {
			if testing.Short() && tt.wantBits > 2048 {
				t.Skip("slow RSA key generation")
			}
			key, err := GenerateKey(tt.alg)
			if err != nil {
				t.Fatalf("GenerateKey(%s): %v", tt.alg, err)
			}
			switch k := key.Public().(type) {
			case *ecdsa.PublicKey:
				if tt.wantCurve == nil || k.Curve != tt.wantCurve {
					t.Fatalf("got ECDSA %s, want %v", k.Curve.Params().Name, tt.alg)
				}
			case *rsa.PublicKey:
				if k.N.BitLen() != tt.wantBits {
					t.Fatalf("got RSA %d bits, want %d", k.N.BitLen(), tt.wantBits)
				}
			default:
				t.Fatalf("unexpected key type %T", k)
			}
			if err := CheckPublicKey(key.Public()); err != nil {
				t.Fatalf("CheckPublicKey of a generated key: %v", err)
			}
		})
	}
}

func TestGenerateKeyUnknown(t *testing.T) {
	for _, alg := range []KeyAlgorithm{"", "ecdsap256", "Ed25519", "RSA1024"} {
		_, err := GenerateKey(alg)
		if err == nil {
			t.Fatalf("GenerateKey(%q) succeeded, want error", alg)
		}
		want := "accepted: ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096"
		if !strings.Contains(err.Error(), want) {
			t.Errorf("GenerateKey(%q) error %q does not contain %q", alg, err, want)
		}
	}
}

func TestKeyPEMRoundTrip(t *testing.T) {
	for _, kind := range []string{string(ECDSAP256), string(ECDSAP384), string(RSA2048)} {
		t.Run(kind, func(t *testing.T) {
			key := testKey(t, kind)
			pemBytes, err := EncodeKeyPEM(key)
			if err != nil {
				t.Fatalf("EncodeKeyPEM: %v", err)
			}
			if !strings.HasPrefix(string(pemBytes), "-----BEGIN PRIVATE KEY-----\n") {
				t.Fatalf("EncodeKeyPEM did not write a PKCS#8 PRIVATE KEY block:\n%.40s", pemBytes)
			}
			got, err := ParseKeyPEM(pemBytes)
			if err != nil {
				t.Fatalf("ParseKeyPEM: %v", err)
			}
			if !got.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(key.Public()) {
				t.Fatal("parsed key differs from the original")
			}
		})
	}
}

func TestParseKeyPEM(t *testing.T) {
	ec := testKey(t, string(ECDSAP256)).(*ecdsa.PrivateKey)
	rk := testKey(t, string(RSA2048)).(*rsa.PrivateKey)
	sec1, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(typ string, der []byte, h map[string]string) string {
		return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der, Headers: h}))
	}
	ecParams := enc("EC PARAMETERS", []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07}, nil)
	tests := []struct {
		name    string
		in      string
		wantErr string // substring; empty means success
	}{
		{name: "PKCS#8", in: enc("PRIVATE KEY", pkcs8, nil)},
		{name: "SEC 1", in: enc("EC PRIVATE KEY", sec1, nil)},
		{name: "SEC 1 after EC PARAMETERS", in: ecParams + enc("EC PRIVATE KEY", sec1, nil)},
		{name: "PKCS#1", in: enc("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rk), nil)},
		{name: "empty", in: "", wantErr: "no PEM block found; expected one PEM block of type PRIVATE KEY"},
		{name: "certificate", in: enc("CERTIFICATE", []byte{1, 2, 3}, nil), wantErr: `unexpected PEM block type "CERTIFICATE"`},
		{name: "two keys", in: enc("PRIVATE KEY", pkcs8, nil) + enc("PRIVATE KEY", pkcs8, nil), wantErr: "more than one key"},
		{name: "encrypted", in: enc("EC PRIVATE KEY", sec1, map[string]string{"Proc-Type": "4,ENCRYPTED"}), wantErr: "encrypted"},
		{name: "garbage DER", in: enc("PRIVATE KEY", []byte{0x30, 0x03, 1, 2, 3}, nil), wantErr: "parsing PRIVATE KEY"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, err := ParseKeyPEM([]byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseKeyPEM: %v", err)
				}
				if key == nil {
					t.Fatal("ParseKeyPEM returned a nil key")
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseKeyPEM succeeded, want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckPublicKey(t *testing.T) {
	rsaN := testKey(t, string(RSA2048)).Public().(*rsa.PublicKey).N
	huge := new(big.Int).Lsh(big.NewInt(1), 9000)
	huge.Add(huge, big.NewInt(1))
	const accepted = "; accepted: RSA with 2048 to 8192 bits, ECDSA P-256 or P-384"
	tests := []struct {
		name    string
		pub     crypto.PublicKey
		wantErr string // full message; empty means accepted
	}{
		{name: "ECDSA P-256", pub: testKey(t, string(ECDSAP256)).Public()},
		{name: "ECDSA P-384", pub: testKey(t, string(ECDSAP384)).Public()},
		{name: "RSA 2048", pub: testKey(t, string(RSA2048)).Public()},
		{name: "RSA 1024", pub: testKey(t, keyRSA1024).Public(), wantErr: "unsupported key: RSA 1024 bits" + accepted},
		{name: "RSA 9001", pub: &rsa.PublicKey{N: huge, E: 65537}, wantErr: "unsupported key: RSA 9001 bits" + accepted},
		{name: "RSA exponent 1", pub: &rsa.PublicKey{N: rsaN, E: 1}, wantErr: "unsupported key: RSA key with public exponent 1" + accepted},
		{name: "RSA even exponent", pub: &rsa.PublicKey{N: rsaN, E: 65536}, wantErr: "unsupported key: RSA key with public exponent 65536" + accepted},
		{name: "RSA even modulus", pub: &rsa.PublicKey{N: new(big.Int).Lsh(big.NewInt(1), 2047), E: 65537}, wantErr: "unsupported key: RSA key with an even modulus" + accepted},
		{name: "RSA nil modulus", pub: &rsa.PublicKey{E: 65537}, wantErr: "unsupported key: malformed RSA key" + accepted},
		{name: "ECDSA P-224", pub: testKey(t, keyP224).Public(), wantErr: "unsupported key: ECDSA P-224" + accepted},
		{name: "ECDSA P-521", pub: testKey(t, keyP521).Public(), wantErr: "unsupported key: ECDSA P-521" + accepted},
		{name: "ECDSA no curve", pub: &ecdsa.PublicKey{}, wantErr: "unsupported key: malformed ECDSA key" + accepted},
		{name: "Ed25519", pub: testKey(t, keyEd25519).Public(), wantErr: "unsupported key: Ed25519" + accepted},
		{name: "nil", pub: nil, wantErr: "unsupported key: unknown key algorithm" + accepted},
		{name: "private key", pub: testKey(t, string(ECDSAP256)), wantErr: "unsupported key: key of type *ecdsa.PrivateKey" + accepted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckPublicKey(tt.pub)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckPublicKey: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckPublicKey accepted %s", tt.name)
			}
			if err.Error() != tt.wantErr {
				t.Fatalf("error %q, want %q", err, tt.wantErr)
			}
			if !errors.Is(err, ErrUnsupportedKey) {
				t.Fatalf("error %q does not wrap ErrUnsupportedKey", err)
			}
		})
	}
}
