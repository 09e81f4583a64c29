// Package signertest makes the CAs, keys and certificate requests that tests of certapi need, in one
// place instead of a copy in every test. Like pkg/signer it is pure Go with no Kubernetes client, so the
// unit tests in pkg/ import it as freely as the tests under test/ do (pkg/signer's own tests cannot:
// this package imports signer).
package signertest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// ClusterDomain is the cluster domain of the CAs NewCA makes.
const ClusterDomain = "cluster.local"

// NewCA returns a new CA for ClusterDomain whose life starts at now and lasts d (signer's default
// when d is 0); it fails tb when it cannot.
func NewCA(tb testing.TB, now time.Time, d time.Duration) *signer.CA {
	tb.Helper()
	ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: ClusterDomain, Duration: d, Now: now})
	if err != nil {
		tb.Fatalf("NewCA: %v", err)
	}
	return ca
}

// Bundle returns the PEM bundle of n new CAs, each as NewCA(tb, time.Now(), 0) makes it.
func Bundle(tb testing.TB, n int) []byte {
	tb.Helper()
	var b []byte
	for range n {
		b = append(b, signer.EncodeBundle(NewCA(tb, time.Now(), 0).Certificate)...)
	}
	return b
}

// ECKey generates an ECDSA key on curve.
func ECKey(tb testing.TB, curve elliptic.Curve) *ecdsa.PrivateKey {
	tb.Helper()
	k, err := ecdsa.GenerateKey(curve, rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// CSRPEM makes a PEM PKCS#10 request for key. Its subject and SANs are deliberately foreign
// (evil.example.com, kubernetes.default.svc): certapi must ignore them and take the identity from the
// ServingCertRequest, so every request a test sends checks that too.
func CSRPEM(tb testing.TB, key crypto.Signer) string {
	tb.Helper()
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{CommonName: "evil.example.com"},
		DNSNames: []string{"evil.example.com", "kubernetes.default.svc"},
	}, key)
	if err != nil {
		tb.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
}
