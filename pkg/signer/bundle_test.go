package signer

import (
	"bytes"
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

func TestEncodeBundle(t *testing.T) {
	a := newTestCA(t, testNow, 0).Certificate
	b := newTestCA(t, testNow, 0).Certificate
	c := newTestCA(t, testNow, 0).Certificate
	pemOf := func(cs ...*x509.Certificate) string {
		var s string
		for _, c := range cs {
			s += string((&CA{Certificate: c}).CertificatePEM())
		}
		return s
	}
	// A re-parsed copy is a different pointer with the same DER.
	aCopy, err := x509.ParseCertificate(bytes.Clone(a.Raw))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   []*x509.Certificate
		want string
	}{
		{name: "empty", in: nil, want: ""},
		{name: "one", in: []*x509.Certificate{a}, want: pemOf(a)},
		{name: "order kept", in: []*x509.Certificate{b, a, c}, want: pemOf(b, a, c)},
		{name: "duplicates dropped, first kept", in: []*x509.Certificate{a, b, a, c, b}, want: pemOf(a, b, c)},
		{name: "duplicate by DER, not pointer", in: []*x509.Certificate{a, aCopy}, want: pemOf(a)},
		{name: "nil skipped", in: []*x509.Certificate{nil, a, nil}, want: pemOf(a)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EncodeBundle(tt.in...)
			if string(got) != tt.want {
				t.Fatalf("EncodeBundle=\n%s\nwant\n%s", got, tt.want)
			}
			if again := EncodeBundle(tt.in...); !bytes.Equal(again, got) {
				t.Fatal("EncodeBundle is not byte-stable")
			}
			if len(got) == 0 {
				return
			}
			parsed, err := ParseBundle(got)
			if err != nil {
				t.Fatalf("ParseBundle: %v", err)
			}
			if !bytes.Equal(EncodeBundle(parsed...), got) {
				t.Fatal("encode(parse(bundle)) differs from bundle")
			}
		})
	}
}

func TestParseBundle(t *testing.T) {
	ca1 := newTestCA(t, testNow, 0)
	ca2 := newTestCA(t, testNow.Add(time.Hour), 0)
	one, two := string(ca1.CertificatePEM()), string(ca2.CertificatePEM())
	keyPEM, err := ca1.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	damaged := "-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"
	tests := []struct {
		name    string
		in      string
		want    int
		wantErr string
	}{
		{name: "one", in: one, want: 1},
		{name: "two", in: one + two, want: 2},
		{name: "comments between blocks", in: "# Active\n" + one + "\n# Next\n" + two + "\n", want: 2},
		{name: "empty", in: "", wantErr: "no certificate found; expected PEM blocks of type CERTIFICATE"},
		{name: "text only", in: "hello\n", wantErr: "no certificate found"},
		{name: "private key", in: one + string(keyPEM), wantErr: `block 2 has type "PRIVATE KEY"; expected PEM blocks of type CERTIFICATE`},
		{name: "damaged block before a good one", in: damaged + one, wantErr: "malformed PEM block 1"},
		{name: "truncated last block", in: one + two[:len(two)/2], wantErr: "malformed PEM block 2"},
		{name: "bad DER", in: "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n", wantErr: "parsing certificate bundle: certificate 1: x509: malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certs, err := ParseBundle([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseBundle succeeded, want error containing %q", tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %q does not contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseBundle: %v", err)
			}
			if len(certs) != tt.want {
				t.Fatalf("got %d certificates, want %d", len(certs), tt.want)
			}
			if !certs[0].Equal(ca1.Certificate) {
				t.Fatal("first certificate differs")
			}
		})
	}
}
