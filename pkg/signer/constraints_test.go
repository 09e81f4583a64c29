package signer

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"
)

// TestNameConstraints signs certificates with the CA key directly, bypassing
// Sign's checks, and shows that x509.Verify (what kube-apiserver uses) refuses
// every name outside "svc" and "svc.<clusterDomain>" and every IP address
// because of the CA's name constraints.
func TestNameConstraints(t *testing.T) {
	ca := newTestCA(t, testNow, 0)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate)
	leafKey := testKey(t, string(ECDSAP256))

	tests := []struct {
		name     string
		dnsNames []string
		ips      []net.IP
		verify   string // the DNSName (or IP) to verify for
		wantOK   bool
	}{
		{name: "service name", dnsNames: []string{"a.b.svc"}, verify: "a.b.svc", wantOK: true},
		{name: "service FQDN", dnsNames: []string{"a.b.svc.cluster.local"}, verify: "a.b.svc.cluster.local", wantOK: true},
		{name: "wildcard pod name", dnsNames: []string{"*.a.b.svc"}, verify: "p.a.b.svc", wantOK: true},
		{name: "external name", dnsNames: []string{"example.com"}, verify: "example.com"},
		{name: "svc label in another domain", dnsNames: []string{"foo.svc.evil.com"}, verify: "foo.svc.evil.com"},
		{name: "svc as a label suffix", dnsNames: []string{"a.b.notsvc"}, verify: "a.b.notsvc"},
		{name: "other cluster domain", dnsNames: []string{"a.b.svc.other.local"}, verify: "a.b.svc.other.local"},
		{name: "short service name", dnsNames: []string{"kubernetes.default"}, verify: "kubernetes.default"},
		{name: "bare service name", dnsNames: []string{"webhook"}, verify: "webhook"},
		{name: "permitted name plus external", dnsNames: []string{"a.b.svc", "example.com"}, verify: "a.b.svc"},
		{name: "IPv4 SAN", ips: []net.IP{net.ParseIP("10.0.0.1")}, verify: "10.0.0.1"},
		{name: "IPv6 SAN", ips: []net.IP{net.ParseIP("fd00::1")}, verify: "fd00::1"},
		{name: "permitted name plus IP", dnsNames: []string{"a.b.svc"}, ips: []net.IP{net.ParseIP("127.0.0.1")}, verify: "a.b.svc"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := &x509.Certificate{
				SerialNumber:   big.NewInt(int64(i + 1)),
				Subject:        pkix.Name{CommonName: "test"},
				DNSNames:       tt.dnsNames,
				IPAddresses:    tt.ips,
				NotBefore:      testNow.Add(-time.Hour),
				NotAfter:       testNow.Add(time.Hour),
				KeyUsage:       x509.KeyUsageDigitalSignature,
				ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				AuthorityKeyId: ca.Certificate.SubjectKeyId,
			}
			der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Certificate, leafKey.Public(), ca.Key)
			if err != nil {
				t.Fatal(err)
			}
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			_, err = cert.Verify(x509.VerifyOptions{
				DNSName: tt.verify, Roots: roots, CurrentTime: testNow,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			if tt.wantOK {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			var invalid x509.CertificateInvalidError
			if !errors.As(err, &invalid) || invalid.Reason != x509.CANotAuthorizedForThisName {
				t.Fatalf("Verify error %v (%T), want CertificateInvalidError with reason CANotAuthorizedForThisName", err, err)
			}
		})
	}
}
