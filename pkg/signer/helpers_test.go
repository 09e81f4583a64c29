package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"sync"
	"testing"
	"time"
)

// testNow is a fixed issuance time so tests do not depend on the clock.
var testNow = time.Date(2030, time.March, 4, 12, 0, 0, 0, time.UTC)

// Test key kinds beyond the managed algorithms, for rejection tests.
const (
	keyRSA1024 = "RSA1024"
	keyP224    = "P224"
	keyP521    = "P521"
	keyEd25519 = "Ed25519"
)

var (
	keyCacheMu sync.Mutex
	keyCache   = map[string]crypto.Signer{}
)

// testKey returns a key of the given kind, generated once per test binary:
// RSA generation is slow and the machine is shared.
func testKey(tb testing.TB, kind string) crypto.Signer {
	tb.Helper()
	keyCacheMu.Lock()
	defer keyCacheMu.Unlock()
	if k, ok := keyCache[kind]; ok {
		return k
	}
	var (
		k   crypto.Signer
		err error
	)
	switch kind {
	case keyRSA1024:
		k, err = rsa.GenerateKey(rand.Reader, 1024)
	case keyP224:
		k, err = ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	case keyP521:
		k, err = ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case keyEd25519:
		_, k, err = ed25519.GenerateKey(rand.Reader)
	default:
		k, err = GenerateKey(KeyAlgorithm(kind))
	}
	if err != nil {
		tb.Fatalf("generating %s key: %v", kind, err)
	}
	keyCache[kind] = k
	return k
}

// newTestCA makes a CA for "cluster.local" issued at now.
func newTestCA(tb testing.TB, now time.Time, d time.Duration) *CA {
	tb.Helper()
	ca, err := NewCA(CAOptions{ClusterDomain: "cluster.local", Duration: d, Now: now})
	if err != nil {
		tb.Fatalf("NewCA: %v", err)
	}
	return ca
}

// csrPEM makes a PEM certificate request signed by key, with a subject and
// SANs that callers must ignore.
func csrPEM(tb testing.TB, key crypto.Signer) []byte {
	tb.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "ignored.example.com"},
		DNSNames: []string{"ignored.example.com"},
	}, key)
	if err != nil {
		tb.Fatalf("CreateCertificateRequest: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
}

// findExtension returns the extension with the given OID, if present.
func findExtension(cert *x509.Certificate, oid []int) (pkix.Extension, bool) {
	for _, e := range cert.Extensions {
		if e.Id.Equal(oid) {
			return e, true
		}
	}
	return pkix.Extension{}, false
}

var (
	oidSubjectAltName  = []int{2, 5, 29, 17}
	oidNameConstraints = []int{2, 5, 29, 30}
	oidBasicConstraint = []int{2, 5, 29, 19}
)
