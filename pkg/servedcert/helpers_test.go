package servedcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

// testCA is a CA the tests sign leaves with.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

var serialCounter int64 = 0x1000

func nextSerial() *big.Int {
	serialCounter++
	return big.NewInt(serialCounter)
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// newCA makes a self-signed CA valid from notBefore to notAfter.
func newCA(t *testing.T, name string, notBefore, notAfter time.Time) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter,
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: c, key: key}
}

// leaf signs a serving certificate for dnsNames, valid from notBefore to notAfter, with usages (serverAuth
// when none).
func (ca *testCA) leaf(t *testing.T, dnsNames []string, notBefore, notAfter time.Time, usages ...x509.ExtKeyUsage) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	if len(usages) == 0 {
		usages = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: nextSerial(), DNSNames: dnsNames,
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, key
}

// tlsCert is leaf with its key and chain as a tls.Certificate.
func tlsCert(leaf *x509.Certificate, key *ecdsa.PrivateKey, chain ...*x509.Certificate) tls.Certificate {
	c := tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	for _, x := range chain {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	return c
}
