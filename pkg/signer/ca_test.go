package signer

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNewCA(t *testing.T) {
	tests := []struct {
		name         string
		opts         CAOptions
		wantCN       string
		wantNotAfter time.Time
		wantDNS      []string
	}{
		{
			name:         "defaults",
			opts:         CAOptions{ClusterDomain: "cluster.local", Now: testNow},
			wantCN:       "certapi-ca@" + itoa(testNow.Unix()),
			wantNotAfter: testNow.Add(8760 * time.Hour),
			wantDNS:      []string{"svc", "svc.cluster.local"},
		},
		{
			name:         "explicit",
			opts:         CAOptions{ClusterDomain: "corp.example", Now: testNow.Add(1500 * time.Millisecond), Duration: 48 * time.Hour, CommonName: "my-ca"},
			wantCN:       "my-ca",
			wantNotAfter: testNow.Add(time.Second + 48*time.Hour),
			wantDNS:      []string{"svc", "svc.corp.example"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ca, err := NewCA(tt.opts)
			if err != nil {
				t.Fatalf("NewCA: %v", err)
			}
			c := ca.Certificate
			if !c.IsCA || !c.BasicConstraintsValid {
				t.Errorf("IsCA=%v BasicConstraintsValid=%v, want both true", c.IsCA, c.BasicConstraintsValid)
			}
			if c.MaxPathLen != 0 || !c.MaxPathLenZero {
				t.Errorf("MaxPathLen=%d MaxPathLenZero=%v, want 0 and true", c.MaxPathLen, c.MaxPathLenZero)
			}
			if ext, ok := findExtension(c, oidBasicConstraint); !ok || !ext.Critical {
				t.Errorf("basic constraints present=%v critical=%v, want critical", ok, ext.Critical)
			}
			wantKU := x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
			if c.KeyUsage != wantKU {
				t.Errorf("KeyUsage=%b, want %b", c.KeyUsage, wantKU)
			}
			if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
				t.Errorf("CA key is %s, want ECDSA P-256", keyDescription(c.PublicKey))
			}
			if c.Subject.CommonName != tt.wantCN {
				t.Errorf("CN=%q, want %q", c.Subject.CommonName, tt.wantCN)
			}
			if !bytes.Equal(c.RawSubject, c.RawIssuer) {
				t.Error("CA is not self-issued")
			}
			if err := c.CheckSignatureFrom(c); err != nil {
				t.Errorf("CA is not self-signed: %v", err)
			}
			ski, err := subjectKeyID(c.PublicKey)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(c.SubjectKeyId, ski) || len(ski) != 20 {
				t.Errorf("SubjectKeyId=%x, want %x", c.SubjectKeyId, ski)
			}
			checkSerial(t, c.SerialNumber)
			now := tt.opts.Now.Truncate(time.Second)
			if !c.NotBefore.Equal(now.Add(-5 * time.Minute)) {
				t.Errorf("NotBefore=%s, want now-5m=%s", c.NotBefore, now.Add(-5*time.Minute))
			}
			if !c.NotAfter.Equal(tt.wantNotAfter) {
				t.Errorf("NotAfter=%s, want %s", c.NotAfter, tt.wantNotAfter)
			}
			if ext, ok := findExtension(c, oidNameConstraints); !ok || !ext.Critical {
				t.Errorf("name constraints present=%v critical=%v, want critical", ok, ext.Critical)
			}
			if !slices.Equal(c.PermittedDNSDomains, tt.wantDNS) {
				t.Errorf("PermittedDNSDomains=%q, want %q", c.PermittedDNSDomains, tt.wantDNS)
			}
			var excluded []string
			for _, n := range c.ExcludedIPRanges {
				excluded = append(excluded, n.String())
			}
			if want := []string{"0.0.0.0/0", "::/0"}; !slices.Equal(excluded, want) {
				t.Errorf("ExcludedIPRanges=%q, want %q", excluded, want)
			}
			if len(c.PermittedIPRanges) != 0 || len(c.ExcludedDNSDomains) != 0 {
				t.Errorf("unexpected constraints: permitted IPs %v, excluded DNS %q", c.PermittedIPRanges, c.ExcludedDNSDomains)
			}
			forbid := []string{ForbiddingConstraint}
			for _, got := range []struct {
				what string
				got  []string
			}{
				{"PermittedURIDomains", c.PermittedURIDomains}, {"ExcludedURIDomains", c.ExcludedURIDomains},
				{"PermittedEmailAddresses", c.PermittedEmailAddresses}, {"ExcludedEmailAddresses", c.ExcludedEmailAddresses},
			} {
				if !slices.Equal(got.got, forbid) {
					t.Errorf("%s=%q, want %q", got.what, got.got, forbid)
				}
			}
			if !ForbidsURIsAndEmails(c) {
				t.Error("ForbidsURIsAndEmails is false for a new CA")
			}
			if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || len(c.UnknownExtKeyUsage) != 0 {
				t.Errorf("ExtKeyUsage=%v (unknown %v), want serverAuth only", c.ExtKeyUsage, c.UnknownExtKeyUsage)
			}
		})
	}
}

func TestNewCAErrors(t *testing.T) {
	tests := []struct {
		name    string
		opts    CAOptions
		wantErr string
	}{
		{name: "no cluster domain", opts: CAOptions{}, wantErr: `cluster domain "": empty; expected a DNS name`},
		{name: "bad cluster domain", opts: CAOptions{ClusterDomain: "Cluster.Local"}, wantErr: `cluster domain "Cluster.Local": label "Cluster": not a DNS label`},
		{name: "trailing dot", opts: CAOptions{ClusterDomain: "cluster.local."}, wantErr: `label "": empty`},
		{name: "negative duration", opts: CAOptions{ClusterDomain: "cluster.local", Duration: -time.Hour}, wantErr: "duration -1h0m0s is negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewCA(tt.opts)
			if err == nil {
				t.Fatal("NewCA succeeded, want error")
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestLoadCA(t *testing.T) {
	ca := newTestCA(t, testNow, 0)
	other := newTestCA(t, testNow, 0)
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatalf("KeyPEM: %v", err)
	}
	otherKeyPEM, err := other.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Sign(LeafRequest{ServiceName: "svc", Namespace: "ns", ClusterDomain: "cluster.local",
		PublicKey: testKey(t, string(ECDSAP256)).Public(), Duration: time.Hour, Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	leafKeyPEM, err := EncodeKeyPEM(testKey(t, string(ECDSAP256)))
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		cert    []byte
		key     []byte
		wantErr string
	}{
		{name: "round trip", cert: ca.CertificatePEM(), key: keyPEM},
		{name: "mismatched key", cert: ca.CertificatePEM(), key: otherKeyPEM, wantErr: "private key does not match"},
		{name: "not a CA", cert: leaf.CertificatePEM, key: leafKeyPEM, wantErr: "not a CA"},
		{name: "two certificates", cert: EncodeBundle(ca.Certificate, other.Certificate), key: keyPEM, wantErr: "found 2 certificates; expected exactly one"},
		{name: "no certificate", cert: nil, key: keyPEM, wantErr: "no certificate found"},
		{name: "no key", cert: ca.CertificatePEM(), key: nil, wantErr: "loading CA key: parsing private key: no PEM block found"},
		{name: "CA without certSign", cert: caWithoutCertSign(t), key: keyPEM, wantErr: "key usage does not include certSign"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := LoadCA(tt.cert, tt.key)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("LoadCA succeeded, want error containing %q", tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %q does not contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadCA: %v", err)
			}
			if !got.Certificate.Equal(ca.Certificate) {
				t.Fatal("loaded certificate differs")
			}
			if !bytes.Equal(got.CertificatePEM(), ca.CertificatePEM()) {
				t.Fatal("CertificatePEM differs after a round trip")
			}
			gotKey, err := got.KeyPEM()
			if err != nil || !bytes.Equal(gotKey, keyPEM) {
				t.Fatalf("KeyPEM differs after a round trip (err %v)", err)
			}
			if got.SubjectKeyID() != FormatKeyID(ca.Certificate.SubjectKeyId) || len(got.SubjectKeyID()) != 40 {
				t.Fatalf("SubjectKeyID()=%q", got.SubjectKeyID())
			}
			// The loaded CA signs leaves that chain to the original.
			l, err := got.Sign(LeafRequest{ServiceName: "svc", Namespace: "ns", ClusterDomain: "cluster.local",
				PublicKey: testKey(t, string(ECDSAP256)).Public(), Duration: time.Hour, Now: testNow})
			if err != nil {
				t.Fatalf("Sign with loaded CA: %v", err)
			}
			if err := l.Certificate.CheckSignatureFrom(ca.Certificate); err != nil {
				t.Fatalf("leaf from loaded CA does not chain to the original: %v", err)
			}
		})
	}
}

// caWithoutCertSign returns a self-signed CA certificate, with the test CA
// key of no importance, whose key usage lacks certSign.
func caWithoutCertSign(t *testing.T) []byte {
	t.Helper()
	key := testKey(t, string(ECDSAP384))
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "no-certsign"},
		NotBefore:             testNow,
		NotAfter:              testNow.Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// checkSerial asserts a serial is positive and at most 128 bits.
func checkSerial(t *testing.T, n *big.Int) {
	t.Helper()
	if n.Sign() <= 0 {
		t.Errorf("serial %s is not positive", n)
	}
	if n.BitLen() > 128 {
		t.Errorf("serial has %d bits, want at most 128", n.BitLen())
	}
}

func itoa(n int64) string { return big.NewInt(n).String() }

// TestCertificateOnlyCA: a CA that no longer signs is loaded from its certificate alone, keeps no key,
// refuses to sign and has no key to encode.
func TestCertificateOnlyCA(t *testing.T) {
	ca, err := NewCA(CAOptions{ClusterDomain: "cluster.local", Now: testNow})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		load func() (*CA, error)
	}{
		{"WithoutKey", func() (*CA, error) { return ca.WithoutKey(), nil }},
		{"LoadCACertificate", func() (*CA, error) { return LoadCACertificate(ca.CertificatePEM()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.load()
			if err != nil {
				t.Fatal(err)
			}
			if got.Key != nil || !got.Certificate.Equal(ca.Certificate) {
				t.Fatal("want the certificate and no key")
			}
			if _, err := got.KeyPEM(); err == nil {
				t.Error("KeyPEM of a CA without a key succeeded")
			}
			key := testKey(t, string(ECDSAP256))
			if _, err := got.Sign(LeafRequest{ServiceName: "web", Namespace: "ns", ClusterDomain: "cluster.local", PublicKey: key.Public(), Duration: time.Hour, Now: testNow}); err == nil || !strings.Contains(err.Error(), "no private key") {
				t.Errorf("Sign: %v; want a refusal for want of a key", err)
			}
		})
	}
	if ca.Key == nil {
		t.Fatal("WithoutKey changed the original CA")
	}
}

// earlierCA returns a CA as NewCA made it before its certificate forbade URIs and e-mail addresses and
// carried an extended key usage: the template of that version, for the records such CAs are stored in.
func earlierCA(t *testing.T, now time.Time) *CA {
	t.Helper()
	key := testKey(t, string(ECDSAP256))
	ski, err := subjectKeyID(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(42),
		Subject:               pkix.Name{CommonName: CACommonNamePrefix + itoa(now.Unix())},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(DefaultCADuration),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		SubjectKeyId:          ski,

		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         PermittedDNSDomains("cluster.local"),
		ExcludedIPRanges: []*net.IPNet{
			{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 8*net.IPv4len)},
			{IP: net.IPv6zero, Mask: net.CIDRMask(0, 8*net.IPv6len)},
		},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{Certificate: cert, Key: key}
}

// TestEarlierCA: a CA stored by an earlier version, without the URI, e-mail and extended key usage
// constraints, still loads from its PEM and signs leaves that verify, and is told apart from a new one;
// CAs are not re-issued for the new constraints.
func TestEarlierCA(t *testing.T) {
	old := earlierCA(t, testNow)
	if ForbidsURIsAndEmails(old.Certificate) {
		t.Fatal("ForbidsURIsAndEmails is true for a CA without URI or e-mail constraints")
	}
	keyPEM, err := old.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(old.Certificate)
	for _, tc := range []struct {
		name string
		load func() (*CA, error)
	}{
		{"LoadCA", func() (*CA, error) { return LoadCA(old.CertificatePEM(), keyPEM) }},
		{"LoadCACertificate", func() (*CA, error) { return LoadCACertificate(old.CertificatePEM()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, err := tc.load()
			if err != nil {
				t.Fatalf("loading: %v", err)
			}
			if ca.Key == nil {
				return // a Retiring CA: its certificate is all it keeps
			}
			leaf, err := ca.Sign(LeafRequest{ServiceName: "web", Namespace: "ns", ClusterDomain: "cluster.local",
				PublicKey: testKey(t, string(ECDSAP256)).Public(), Duration: time.Hour, Now: testNow})
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			if _, err := leaf.Certificate.Verify(x509.VerifyOptions{DNSName: "web.ns.svc", Roots: roots, CurrentTime: testNow,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				t.Fatalf("Verify: %v", err)
			}
		})
	}
}
