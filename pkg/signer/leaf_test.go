package signer

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSign(t *testing.T) {
	ca := newTestCA(t, testNow, 0)
	longSvc := "a-service-name-that-is-long-enough-to-push-the-cn-past-64-chars" // 63 characters
	tests := []struct {
		name     string
		key      string
		svc, ns  string
		extra    []string
		wantSANs []string
		wantCN   string // empty: empty subject with a critical SAN extension
		wantKU   x509.KeyUsage
	}{
		{
			name: "ECDSA P-256", key: string(ECDSAP256), svc: "webhook", ns: "team-a",
			wantSANs: []string{"webhook.team-a.svc", "webhook.team-a.svc.cluster.local"},
			wantCN:   "webhook.team-a.svc",
			wantKU:   x509.KeyUsageDigitalSignature,
		},
		{
			name: "ECDSA P-384 with extra names", key: string(ECDSAP384), svc: "webhook", ns: "team-a",
			extra: []string{"other.team-a.svc", "*.webhook.team-a.svc", "webhook.team-a.svc", "other.team-a.svc.cluster.local"},
			wantSANs: []string{"webhook.team-a.svc", "webhook.team-a.svc.cluster.local",
				"other.team-a.svc", "*.webhook.team-a.svc", "other.team-a.svc.cluster.local"},
			wantCN: "webhook.team-a.svc",
			wantKU: x509.KeyUsageDigitalSignature,
		},
		{
			name: "RSA 2048", key: string(RSA2048), svc: "conv", ns: "kube-system",
			wantSANs: []string{"conv.kube-system.svc", "conv.kube-system.svc.cluster.local"},
			wantCN:   "conv.kube-system.svc",
			wantKU:   x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		},
		{
			name: "CN of exactly 64 characters", key: string(ECDSAP256), svc: longSvc[:56], ns: "ns",
			wantSANs: []string{longSvc[:56] + ".ns.svc", longSvc[:56] + ".ns.svc.cluster.local"},
			wantCN:   longSvc[:56] + ".ns.svc",
			wantKU:   x509.KeyUsageDigitalSignature,
		},
		{
			name: "name over 64 characters", key: string(ECDSAP256), svc: longSvc, ns: "ns",
			wantSANs: []string{longSvc + ".ns.svc", longSvc + ".ns.svc.cluster.local"},
			wantCN:   "",
			wantKU:   x509.KeyUsageDigitalSignature,
		},
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := testKey(t, tt.key)
			leaf, err := ca.Sign(LeafRequest{
				ServiceName: tt.svc, Namespace: tt.ns, ClusterDomain: "cluster.local",
				DNSNames: tt.extra, PublicKey: key.Public(), Duration: 24 * time.Hour, Now: testNow,
			})
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			c := leaf.Certificate

			// It verifies against the CA for each of its names, for serverAuth.
			var hosts []string
			for _, name := range tt.wantSANs {
				if rest, ok := strings.CutPrefix(name, "*."); ok {
					name = "pod-0." + rest
				}
				hosts = append(hosts, name)
			}
			for _, name := range hosts {
				if _, err := c.Verify(x509.VerifyOptions{
					DNSName: name, Roots: roots, CurrentTime: testNow,
					KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
				}); err != nil {
					t.Errorf("Verify(%s): %v", name, err)
				}
			}
			// Bare names are never present.
			for _, bare := range []string{tt.svc, tt.svc + "." + tt.ns} {
				if slices.Contains(c.DNSNames, bare) {
					t.Errorf("certificate contains bare name %q", bare)
				}
				if err := c.VerifyHostname(bare); err == nil {
					t.Errorf("certificate is valid for bare name %q", bare)
				}
			}
			if !slices.Equal(c.DNSNames, tt.wantSANs) {
				t.Errorf("DNSNames=%q, want %q", c.DNSNames, tt.wantSANs)
			}
			if len(c.IPAddresses)+len(c.URIs)+len(c.EmailAddresses) != 0 {
				t.Errorf("unexpected SANs: %v %v %v", c.IPAddresses, c.URIs, c.EmailAddresses)
			}

			// Subject: CN when it fits, else empty with a critical SAN extension.
			san, ok := findExtension(c, oidSubjectAltName)
			if !ok {
				t.Fatal("no SAN extension")
			}
			if tt.wantCN != "" {
				if c.Subject.CommonName != tt.wantCN || len(c.Subject.Names) != 1 {
					t.Errorf("subject=%q, want CN=%s only", c.Subject, tt.wantCN)
				}
				if san.Critical {
					t.Error("SAN extension is critical with a non-empty subject")
				}
			} else {
				if len(c.Subject.Names) != 0 || !bytes.Equal(c.RawSubject, []byte{0x30, 0x00}) {
					t.Errorf("subject=%q (raw %x), want empty", c.Subject, c.RawSubject)
				}
				if !san.Critical {
					t.Error("SAN extension is not critical with an empty subject")
				}
			}

			if c.KeyUsage != tt.wantKU {
				t.Errorf("KeyUsage=%b, want %b", c.KeyUsage, tt.wantKU)
			}
			if !slices.Equal(c.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) || len(c.UnknownExtKeyUsage) != 0 {
				t.Errorf("ExtKeyUsage=%v %v, want serverAuth only", c.ExtKeyUsage, c.UnknownExtKeyUsage)
			}
			if !c.BasicConstraintsValid || c.IsCA {
				t.Errorf("BasicConstraintsValid=%v IsCA=%v, want a CA:false extension", c.BasicConstraintsValid, c.IsCA)
			}
			wantSKI, err := subjectKeyID(key.Public())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(c.SubjectKeyId, wantSKI) || len(c.SubjectKeyId) != 20 {
				t.Errorf("SubjectKeyId=%x, want %x", c.SubjectKeyId, wantSKI)
			}
			if !bytes.Equal(c.AuthorityKeyId, ca.Certificate.SubjectKeyId) {
				t.Errorf("AuthorityKeyId=%x, want the CA's SubjectKeyId %x", c.AuthorityKeyId, ca.Certificate.SubjectKeyId)
			}
			checkSerial(t, c.SerialNumber)
			if leaf.SerialNumber != c.SerialNumber.Text(16) || strings.ToLower(leaf.SerialNumber) != leaf.SerialNumber {
				t.Errorf("SerialNumber=%q, want lower-case hex of %s", leaf.SerialNumber, c.SerialNumber)
			}
			if !c.NotBefore.Equal(testNow.Add(-5*time.Minute)) || !leaf.NotBefore.Equal(c.NotBefore) {
				t.Errorf("NotBefore=%s (Leaf %s), want now-5m", c.NotBefore, leaf.NotBefore)
			}
			if !c.NotAfter.Equal(testNow.Add(24*time.Hour)) || !leaf.NotAfter.Equal(c.NotAfter) {
				t.Errorf("NotAfter=%s (Leaf %s), want now+24h", c.NotAfter, leaf.NotAfter)
			}
			parsed, err := ParseBundle(leaf.CertificatePEM)
			if err != nil || len(parsed) != 1 || !parsed[0].Equal(c) {
				t.Errorf("CertificatePEM does not hold the certificate (err %v)", err)
			}
		})
	}
}

func TestSignSerialsDiffer(t *testing.T) {
	ca := newTestCA(t, testNow, 0)
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		leaf, err := ca.Sign(LeafRequest{ServiceName: "s", Namespace: "n", ClusterDomain: "cluster.local",
			PublicKey: testKey(t, string(ECDSAP256)).Public(), Duration: time.Hour, Now: testNow})
		if err != nil {
			t.Fatal(err)
		}
		if seen[leaf.SerialNumber] {
			t.Fatalf("serial %s issued twice", leaf.SerialNumber)
		}
		seen[leaf.SerialNumber] = true
	}
}

func TestSignValidity(t *testing.T) {
	caNow := testNow
	ca := newTestCA(t, caNow, 100*time.Hour) // valid caNow-5m .. caNow+100h
	tests := []struct {
		name          string
		now           time.Time
		duration      time.Duration
		wantNotBefore time.Time
		wantNotAfter  time.Time
		wantErr       string
	}{
		{name: "inside", now: caNow.Add(time.Hour), duration: 24 * time.Hour,
			wantNotBefore: caNow.Add(55 * time.Minute), wantNotAfter: caNow.Add(25 * time.Hour)},
		{name: "capped at CA notAfter", now: caNow.Add(90 * time.Hour), duration: 24 * time.Hour,
			wantNotBefore: caNow.Add(90*time.Hour - 5*time.Minute), wantNotAfter: caNow.Add(100 * time.Hour)},
		{name: "not before the CA", now: caNow, duration: time.Hour,
			wantNotBefore: caNow.Add(-5 * time.Minute), wantNotAfter: caNow.Add(time.Hour)},
		{name: "backdate clamped to CA notBefore", now: caNow.Add(-2 * time.Minute), duration: time.Hour,
			wantNotBefore: caNow.Add(-5 * time.Minute), wantNotAfter: caNow.Add(58 * time.Minute)},
		{name: "sub-second now truncated", now: caNow.Add(time.Hour + 900*time.Millisecond), duration: time.Hour,
			wantNotBefore: caNow.Add(55 * time.Minute), wantNotAfter: caNow.Add(2 * time.Hour)},
		{name: "CA expired", now: caNow.Add(100 * time.Hour), duration: time.Hour, wantErr: "CA expired at 2030-03-08T16:00:00Z"},
		{name: "CA not yet valid", now: caNow.Add(-time.Hour), duration: time.Hour, wantErr: "CA is not valid until 2030-03-04T11:55:00Z"},
		{name: "zero duration", now: caNow, duration: 0, wantErr: "duration 0s; expected a positive duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leaf, err := ca.Sign(LeafRequest{ServiceName: "s", Namespace: "n", ClusterDomain: "cluster.local",
				PublicKey: testKey(t, string(ECDSAP256)).Public(), Duration: tt.duration, Now: tt.now})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			if !leaf.NotBefore.Equal(tt.wantNotBefore) || !leaf.NotAfter.Equal(tt.wantNotAfter) {
				t.Fatalf("validity %s..%s, want %s..%s", leaf.NotBefore, leaf.NotAfter, tt.wantNotBefore, tt.wantNotAfter)
			}
			if leaf.NotAfter.After(ca.Certificate.NotAfter) {
				t.Fatal("leaf outlives its CA")
			}
		})
	}
}

func TestSignRejects(t *testing.T) {
	ca := newTestCA(t, testNow, 0)
	ok := LeafRequest{ServiceName: "svc", Namespace: "ns", ClusterDomain: "cluster.local",
		PublicKey: testKey(t, string(ECDSAP256)).Public(), Duration: time.Hour, Now: testNow}
	tests := []struct {
		name    string
		mutate  func(r *LeafRequest)
		wantErr string
	}{
		{name: "empty service", mutate: func(r *LeafRequest) { r.ServiceName = "" }, wantErr: `service name "": empty`},
		{name: "service starts with digit", mutate: func(r *LeafRequest) { r.ServiceName = "1svc" }, wantErr: "must start with a letter"},
		{name: "service with dot", mutate: func(r *LeafRequest) { r.ServiceName = "a.b" }, wantErr: `service name "a.b": not a DNS label`},
		{name: "upper-case namespace", mutate: func(r *LeafRequest) { r.Namespace = "NS" }, wantErr: `namespace "NS": not a DNS label`},
		{name: "empty cluster domain", mutate: func(r *LeafRequest) { r.ClusterDomain = "" }, wantErr: `cluster domain "": empty`},
		{name: "other namespace", mutate: func(r *LeafRequest) { r.DNSNames = []string{"x.other.svc"} },
			wantErr: `DNS name "x.other.svc" is outside namespace "ns"; accepted: <name>.ns.svc or <name>.ns.svc.cluster.local`},
		{name: "external name", mutate: func(r *LeafRequest) { r.DNSNames = []string{"example.com"} }, wantErr: "is outside namespace"},
		{name: "namespace suffix lookalike", mutate: func(r *LeafRequest) { r.DNSNames = []string{"x.other-ns.svc"} }, wantErr: "is outside namespace"},
		{name: "bare namespace", mutate: func(r *LeafRequest) { r.DNSNames = []string{"ns.svc"} }, wantErr: "is outside namespace"},
		{name: "namespace wildcard", mutate: func(r *LeafRequest) { r.DNSNames = []string{"*.ns.svc"} }, wantErr: "namespace-wide wildcard"},
		{name: "upper case", mutate: func(r *LeafRequest) { r.DNSNames = []string{"X.ns.svc"} }, wantErr: `DNS name "X.ns.svc": label "X": not a DNS label`},
		{name: "trailing dot", mutate: func(r *LeafRequest) { r.DNSNames = []string{"x.ns.svc."} }, wantErr: `label "": empty`},
		{name: "IP address", mutate: func(r *LeafRequest) { r.DNSNames = []string{"10.0.0.1"} }, wantErr: "is outside namespace"},
		{name: "inner wildcard", mutate: func(r *LeafRequest) { r.DNSNames = []string{"a.*.ns.svc"} }, wantErr: `label "*": not a DNS label`},
		{name: "kubernetes.default", mutate: func(r *LeafRequest) { r.ServiceName, r.Namespace = "kubernetes", "default" },
			wantErr: `"kubernetes.default.svc" belongs to the Kubernetes API server`},
		{name: "kubernetes.default as extra", mutate: func(r *LeafRequest) {
			r.Namespace, r.DNSNames = "default", []string{"kubernetes.default.svc.cluster.local"}
		}, wantErr: "belongs to the Kubernetes API server"},
		{name: "cluster domain not permitted by CA", mutate: func(r *LeafRequest) { r.ClusterDomain = "corp.example" },
			wantErr: `DNS name "svc.ns.svc.corp.example" is not permitted by the CA's name constraints; accepted: names under svc, svc.cluster.local`},
		{name: "RSA 1024 key", mutate: func(r *LeafRequest) { r.PublicKey = testKey(t, keyRSA1024).Public() }, wantErr: "unsupported key: RSA 1024 bits"},
		{name: "no key", mutate: func(r *LeafRequest) { r.PublicKey = nil }, wantErr: "unsupported key"},
		{name: "negative duration", mutate: func(r *LeafRequest) { r.Duration = -time.Hour }, wantErr: "expected a positive duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := ok
			tt.mutate(&req)
			_, err := ca.Sign(req)
			if err == nil {
				t.Fatalf("Sign succeeded, want error containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
	if _, err := ca.Sign(ok); err != nil {
		t.Fatalf("baseline request fails: %v", err)
	}
	var nilCA *CA
	if _, err := nilCA.Sign(ok); err == nil {
		t.Fatal("Sign on a nil CA succeeded")
	}
	if _, err := (&CA{}).Sign(ok); err == nil {
		t.Fatal("Sign on an empty CA succeeded")
	}
	_, err := ca.Sign(LeafRequest{ServiceName: "svc", Namespace: "ns", ClusterDomain: "cluster.local",
		PublicKey: testKey(t, keyP521).Public(), Duration: time.Hour, Now: testNow})
	if !errors.Is(err, ErrUnsupportedKey) {
		t.Fatalf("P-521 key: error %v does not wrap ErrUnsupportedKey", err)
	}
}

func TestSANs(t *testing.T) {
	tests := []struct {
		name            string
		svc, ns, domain string
		extra, want     []string
	}{
		{name: "basic", svc: "a", ns: "b", domain: "cluster.local",
			want: []string{"a.b.svc", "a.b.svc.cluster.local"}},
		{name: "extra kept in order, deduplicated", svc: "a", ns: "b", domain: "cluster.local",
			extra: []string{"z.b.svc", "a.b.svc", "c.b.svc", "z.b.svc", "", "a.b.svc.cluster.local"},
			want:  []string{"a.b.svc", "a.b.svc.cluster.local", "z.b.svc", "c.b.svc"}},
		{name: "no cluster domain", svc: "a", ns: "b",
			want: []string{"a.b.svc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SANs(tt.svc, tt.ns, tt.domain, tt.extra)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("SANs=%q, want %q", got, tt.want)
			}
		})
	}
}

func TestMatchDNSConstraint(t *testing.T) {
	tests := []struct {
		name, constraint string
		want             bool
	}{
		{"a.b.svc", "svc", true},
		{"svc", "svc", true},
		{"a.b.svc", ".svc", true},
		{"svc", ".svc", false},
		{"a.svc.evil.com", "svc", false},
		{"a.bsvc", "svc", false},
		{"a.b.svc.cluster.local", "svc.cluster.local", true},
		{"a.b.svc.cluster.local", "svc", false},
		{"anything", "", true},
	}
	for _, tt := range tests {
		if got := matchDNSConstraint(tt.name, tt.constraint); got != tt.want {
			t.Errorf("matchDNSConstraint(%q, %q)=%v, want %v", tt.name, tt.constraint, got, tt.want)
		}
	}
}

// TestSignPEMReportsTheCertificate: SignPEM reports the serial and validity of the certificate it
// made, as parsing its PEM reads them, without the parsed certificate.
func TestSignPEMReportsTheCertificate(t *testing.T) {
	caNow := testNow
	ca := newTestCA(t, caNow, 100*time.Hour)
	for _, tc := range []struct {
		name     string
		now      time.Time
		duration time.Duration
		kind     string
	}{
		{name: "inside", now: caNow.Add(time.Hour), duration: 24 * time.Hour, kind: string(ECDSAP256)},
		{name: "capped at CA notAfter", now: caNow.Add(90 * time.Hour), duration: 24 * time.Hour, kind: string(ECDSAP256)},
		{name: "backdate clamped to CA notBefore", now: caNow.Add(-2 * time.Minute), duration: time.Hour, kind: string(RSA2048)},
		{name: "sub-second now", now: caNow.Add(time.Hour + 900*time.Millisecond), duration: time.Hour, kind: string(ECDSAP256)},
		{name: "local time zone", now: caNow.Add(time.Hour).In(time.FixedZone("UTC+3", 3*3600)), duration: time.Hour, kind: string(ECDSAP256)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaf, err := ca.SignPEM(LeafRequest{ServiceName: "s", Namespace: "n", ClusterDomain: "cluster.local",
				PublicKey: testKey(t, tc.kind).Public(), Duration: tc.duration, Now: tc.now})
			if err != nil {
				t.Fatalf("SignPEM: %v", err)
			}
			if leaf.Certificate != nil {
				t.Errorf("Leaf.Certificate is set; SignPEM parses nothing")
			}
			block, _ := pem.Decode(leaf.CertificatePEM)
			if block == nil {
				t.Fatalf("no PEM block in %q", leaf.CertificatePEM)
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				t.Fatalf("parsing the certificate: %v", err)
			}
			if want := FormatSerialNumber(cert.SerialNumber); leaf.SerialNumber != want {
				t.Errorf("serial %s; the certificate's is %s", leaf.SerialNumber, want)
			}
			if leaf.NotBefore != cert.NotBefore || leaf.NotAfter != cert.NotAfter {
				t.Errorf("validity %s..%s; the certificate's is %s..%s", leaf.NotBefore, leaf.NotAfter, cert.NotBefore, cert.NotAfter)
			}
			if err := cert.CheckSignatureFrom(ca.Certificate); err != nil {
				t.Errorf("signature: %v", err)
			}
		})
	}
}
