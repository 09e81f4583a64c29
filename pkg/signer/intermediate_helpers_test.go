package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"testing"
	"time"
)

// testUpstream is an organisation's CA in tests: a root or an intermediate
// under one, which signs certapi's certificate requests as an upstream would.
type testUpstream struct {
	cert *x509.Certificate
	key  crypto.Signer
}

// upstreamKey returns a fresh key of kind for an organisation's CA: never
// one of testKey's, which the tests use as certapi's CA key. RSA keys come
// from testKey's cache under kinds no test uses for certapi's key.
func upstreamKey(tb testing.TB, kind string) crypto.Signer {
	tb.Helper()
	switch kind {
	case "RSA":
		return testKey(tb, string(RSA3072))
	case "P384":
		k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		return k
	case keyRSA1024:
		return testKey(tb, keyRSA1024)
	default:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		return k
	}
}

// newTestRoot makes a self-signed root valid from a year before testNow to
// ten years after it; tweak, when set, changes its template.
func newTestRoot(tb testing.TB, name, keyKind string, tweak func(*x509.Certificate)) *testUpstream {
	tb.Helper()
	key := upstreamKey(tb, keyKind)
	tmpl := upstreamCATemplate(tb, name, key.Public())
	if tweak != nil {
		tweak(tmpl)
	}
	return &testUpstream{cert: createCert(tb, tmpl, tmpl, key.Public(), key), key: key}
}

// subCA makes an intermediate CA signed by u.
func (u *testUpstream) subCA(tb testing.TB, name string, tweak func(*x509.Certificate)) *testUpstream {
	tb.Helper()
	key := upstreamKey(tb, "P256")
	tmpl := upstreamCATemplate(tb, name, key.Public())
	if tweak != nil {
		tweak(tmpl)
	}
	return &testUpstream{cert: createCert(tb, tmpl, u.cert, key.Public(), u.key), key: key}
}

func upstreamCATemplate(tb testing.TB, name string, pub crypto.PublicKey) *x509.Certificate {
	tb.Helper()
	serial, err := RandomSerial()
	if err != nil {
		tb.Fatal(err)
	}
	ski, err := subjectKeyID(pub)
	if err != nil {
		tb.Fatal(err)
	}
	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Example Org"}},
		NotBefore:             testNow.Add(-365 * 24 * time.Hour),
		NotAfter:              testNow.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            -1,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId:          ski,
	}
}

// signCSR signs certapi's request as an upstream that copies every requested
// extension does (openssl's -copy_extensions copyall): valid from an hour
// before testNow for a year, with a subject key identifier. tweak, when set,
// changes the template (drop requested extensions with dropExtension first to
// replace them with template fields).
func (u *testUpstream) signCSR(tb testing.TB, csrPEM []byte, tweak func(*x509.Certificate)) *x509.Certificate {
	tb.Helper()
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		tb.Fatal("no PEM in the request")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		tb.Fatal(err)
	}
	if err := csr.CheckSignature(); err != nil {
		tb.Fatal(err)
	}
	serial, err := RandomSerial()
	if err != nil {
		tb.Fatal(err)
	}
	ski, err := subjectKeyID(csr.PublicKey)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:    serial,
		Subject:         csr.Subject,
		NotBefore:       testNow.Add(-time.Hour),
		NotAfter:        testNow.Add(365 * 24 * time.Hour),
		SubjectKeyId:    ski,
		ExtraExtensions: csr.Extensions,
	}
	if tweak != nil {
		tweak(tmpl)
	}
	return createCert(tb, tmpl, u.cert, csr.PublicKey, u.key)
}

// dropExtension removes a requested extension from tmpl's ExtraExtensions.
func dropExtension(tmpl *x509.Certificate, oid asn1.ObjectIdentifier) {
	var kept []pkix.Extension
	for _, e := range tmpl.ExtraExtensions {
		if !e.Id.Equal(oid) {
			kept = append(kept, e)
		}
	}
	tmpl.ExtraExtensions = kept
}

func createCert(tb testing.TB, tmpl, parent *x509.Certificate, pub crypto.PublicKey, key crypto.Signer) *x509.Certificate {
	tb.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, key)
	if err != nil {
		tb.Fatalf("CreateCertificate: %v", err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// intermediateCSR makes certapi's request for key, for "cluster.local".
func intermediateCSR(tb testing.TB, key crypto.Signer) []byte {
	tb.Helper()
	csr, err := IntermediateRequest(key, IntermediateOptions{ClusterDomain: "cluster.local", Now: testNow})
	if err != nil {
		tb.Fatalf("IntermediateRequest: %v", err)
	}
	return csr
}

// importOpts are ImportOptions for "cluster.local" at testNow.
func importOpts() ImportOptions {
	return ImportOptions{ClusterDomain: "cluster.local", Now: testNow}
}

func bundleOf(certs ...*x509.Certificate) []byte {
	return EncodeBundle(certs...)
}

// mustImport imports cert under the chain, failing tb on a refusal.
func mustImport(tb testing.TB, cert *x509.Certificate, chain []*x509.Certificate, key crypto.Signer, opts ImportOptions) (*CA, []Finding) {
	tb.Helper()
	ca, warnings, err := CheckIntermediate(bundleOf(cert), bundleOf(chain...), key, opts)
	if err != nil {
		tb.Fatalf("CheckIntermediate: %v", err)
	}
	return ca, warnings
}
