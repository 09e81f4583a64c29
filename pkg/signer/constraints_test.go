package signer

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/url"
	"slices"
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

// TestURIAndEmailConstraints signs leaves with the CA key directly, bypassing
// Sign, and shows that x509.Verify refuses every URI and every e-mail address
// SAN because of the CA's name constraints, whatever the host, even one under
// a permitted DNS constraint or under ForbiddingConstraint itself, while a
// leaf with only Service names still verifies.
func TestURIAndEmailConstraints(t *testing.T) {
	ca := newTestCA(t, testNow, 0)
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate)
	leafKey := testKey(t, string(ECDSAP256))

	tests := []struct {
		name   string
		uris   []string
		emails []string
		wantOK bool
	}{
		{name: "Service names only", wantOK: true},
		{name: "SPIFFE ID", uris: []string{"spiffe://cluster.local/ns/b/sa/a"}},
		{name: "URI of an external host", uris: []string{"https://example.com/"}},
		{name: "URI of a permitted DNS name", uris: []string{"https://a.b.svc/"}},
		{name: "URI of the forbidding base", uris: []string{"https://invalid/"}},
		{name: "URI under the forbidding base", uris: []string{"https://x.invalid/"}},
		{name: "URI without a host", uris: []string{"urn:uuid:8f2b4d3e-6a1c-4e0b-9d7a-2c5e1f0a3b4c"}},
		{name: "e-mail of an external domain", emails: []string{"admin@example.com"}},
		{name: "e-mail of a permitted DNS name", emails: []string{"admin@a.b.svc"}},
		{name: "e-mail of the forbidding base", emails: []string{"admin@invalid"}},
		{name: "e-mail under the forbidding base", emails: []string{"admin@x.invalid"}},
		{name: "URI and e-mail", uris: []string{"https://example.com/"}, emails: []string{"admin@example.com"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := &x509.Certificate{
				SerialNumber:   big.NewInt(int64(i + 1)),
				Subject:        pkix.Name{CommonName: "a.b.svc"},
				DNSNames:       []string{"a.b.svc"},
				EmailAddresses: tt.emails,
				NotBefore:      testNow.Add(-time.Hour),
				NotAfter:       testNow.Add(time.Hour),
				KeyUsage:       x509.KeyUsageDigitalSignature,
				ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				AuthorityKeyId: ca.Certificate.SubjectKeyId,
			}
			for _, u := range tt.uris {
				parsed, err := url.Parse(u)
				if err != nil {
					t.Fatal(err)
				}
				tmpl.URIs = append(tmpl.URIs, parsed)
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
				DNSName: "a.b.svc", Roots: roots, CurrentTime: testNow,
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

// TestCAExtKeyUsage signs leaves with the CA key directly, bypassing Sign,
// and shows that x509.Verify, which requires every certificate of a chain to
// allow the usage asked for, refuses a certificate of the CA for anything but
// serverAuth, whatever the leaf claims; the CA's own extended key usage is
// serverAuth alone.
func TestCAExtKeyUsage(t *testing.T) {
	ca := newTestCA(t, testNow, 0)
	if !slices.Equal(ca.Certificate.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || len(ca.Certificate.UnknownExtKeyUsage) != 0 {
		t.Errorf("CA extended key usage %v (unknown %v), want serverAuth only", ca.Certificate.ExtKeyUsage, ca.Certificate.UnknownExtKeyUsage)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate)
	leafKey := testKey(t, string(ECDSAP256))

	tests := []struct {
		name   string
		leaf   []x509.ExtKeyUsage // the leaf's extended key usage
		verify x509.ExtKeyUsage   // the usage verified for
		wantOK bool
	}{
		{name: "serverAuth leaf for serverAuth", leaf: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, verify: x509.ExtKeyUsageServerAuth, wantOK: true},
		{name: "serverAuth and clientAuth leaf for serverAuth", leaf: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, verify: x509.ExtKeyUsageServerAuth, wantOK: true},
		{name: "clientAuth leaf for clientAuth", leaf: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, verify: x509.ExtKeyUsageClientAuth},
		{name: "serverAuth and clientAuth leaf for clientAuth", leaf: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, verify: x509.ExtKeyUsageClientAuth},
		{name: "any-usage leaf for clientAuth", leaf: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}, verify: x509.ExtKeyUsageClientAuth},
		{name: "leaf without extended key usage for clientAuth", verify: x509.ExtKeyUsageClientAuth},
		{name: "emailProtection leaf", leaf: []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection}, verify: x509.ExtKeyUsageEmailProtection},
		{name: "codeSigning leaf", leaf: []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning}, verify: x509.ExtKeyUsageCodeSigning},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl := &x509.Certificate{
				SerialNumber:   big.NewInt(int64(i + 1)),
				Subject:        pkix.Name{CommonName: "a.b.svc"},
				DNSNames:       []string{"a.b.svc"},
				NotBefore:      testNow.Add(-time.Hour),
				NotAfter:       testNow.Add(time.Hour),
				KeyUsage:       x509.KeyUsageDigitalSignature,
				ExtKeyUsage:    tt.leaf,
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
				DNSName: "a.b.svc", Roots: roots, CurrentTime: testNow,
				KeyUsages: []x509.ExtKeyUsage{tt.verify},
			})
			if tt.wantOK {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			var invalid x509.CertificateInvalidError
			if !errors.As(err, &invalid) || invalid.Reason != x509.IncompatibleUsage {
				t.Fatalf("Verify error %v (%T), want CertificateInvalidError with reason IncompatibleUsage", err, err)
			}
		})
	}
}
