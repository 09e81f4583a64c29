package signer

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestIntermediateRequest(t *testing.T) {
	key := testKey(t, string(ECDSAP256))
	csrPEM, err := IntermediateRequest(key, IntermediateOptions{ClusterDomain: "cluster.local", Organization: "Example Org", Now: testNow})
	if err != nil {
		t.Fatalf("IntermediateRequest: %v", err)
	}
	block, rest := pem.Decode(csrPEM)
	if block == nil || block.Type != "CERTIFICATE REQUEST" || len(bytes.TrimSpace(rest)) != 0 {
		t.Fatalf("want exactly one CERTIFICATE REQUEST block, got %q", csrPEM)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if err := csr.CheckSignature(); err != nil {
		t.Fatalf("the request's signature does not verify: %v", err)
	}
	if !key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(csr.PublicKey) {
		t.Fatal("the request is not for the CA key")
	}
	if want := CACommonNamePrefix + itoa(testNow.Unix()); csr.Subject.CommonName != want {
		t.Errorf("CN=%q, want %q", csr.Subject.CommonName, want)
	}
	if !slices.Equal(csr.Subject.Organization, []string{"Example Org"}) {
		t.Errorf("O=%q, want [Example Org]", csr.Subject.Organization)
	}
	if len(csr.DNSNames)+len(csr.IPAddresses)+len(csr.URIs)+len(csr.EmailAddresses) != 0 {
		t.Errorf("the request asks for SANs: %v %v %v %v", csr.DNSNames, csr.IPAddresses, csr.URIs, csr.EmailAddresses)
	}
	// Exactly the four extensions, with the criticality a CA of certapi's has.
	wantExt := map[string]bool{"2.5.29.19": true, "2.5.29.15": true, "2.5.29.37": false, "2.5.29.30": true}
	if len(csr.Extensions) != len(wantExt) {
		t.Errorf("%d requested extensions, want %d: %v", len(csr.Extensions), len(wantExt), csr.Extensions)
	}
	for _, e := range csr.Extensions {
		critical, ok := wantExt[e.Id.String()]
		if !ok {
			t.Errorf("unexpected requested extension %s", e.Id)
			continue
		}
		if e.Critical != critical {
			t.Errorf("extension %s critical=%v, want %v", e.Id, e.Critical, critical)
		}
	}
	// basicConstraints: cA TRUE, pathLen 0.
	var bc struct {
		IsCA       bool `asn1:"optional"`
		MaxPathLen int  `asn1:"optional,default:-1"`
	}
	for _, e := range csr.Extensions {
		if e.Id.Equal(oidExtBasicConstraints) {
			if _, err := asn1.Unmarshal(e.Value, &bc); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !bc.IsCA || bc.MaxPathLen != 0 {
		t.Errorf("basicConstraints cA=%v pathLen=%d, want true and 0", bc.IsCA, bc.MaxPathLen)
	}
	// The name constraints are byte for byte NewCA's.
	ca := newTestCA(t, testNow, 0)
	caNC, _ := findExtension(ca.Certificate, oidNameConstraints)
	for _, e := range csr.Extensions {
		if e.Id.Equal(oidExtNameConstraints) && !bytes.Equal(e.Value, caNC.Value) {
			t.Error("the requested name constraints differ from NewCA's")
		}
	}
	// Signed with every requested extension copied, the certificate is what certapi asked for.
	cert := newTestRoot(t, "Example Root", "P256", nil).signCSR(t, csrPEM, nil)
	if !cert.IsCA || !cert.MaxPathLenZero || cert.MaxPathLen != 0 {
		t.Errorf("IsCA=%v MaxPathLen=%d, want a CA with path length 0", cert.IsCA, cert.MaxPathLen)
	}
	if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign; cert.KeyUsage != want {
		t.Errorf("KeyUsage=%b, want %b", cert.KeyUsage, want)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("ExtKeyUsage=%v, want serverAuth", cert.ExtKeyUsage)
	}
	if !cert.PermittedDNSDomainsCritical || !slices.Equal(cert.PermittedDNSDomains, []string{"svc", "svc.cluster.local"}) || !ForbidsURIsAndEmails(cert) || len(cert.ExcludedIPRanges) != 2 {
		t.Errorf("name constraints %v %v, want NewCA's", cert.PermittedDNSDomains, cert.ExcludedIPRanges)
	}
}

func TestIntermediateRequestErrors(t *testing.T) {
	tests := []struct {
		name string
		key  crypto.Signer
		opts IntermediateOptions
		want string
	}{
		{name: "no key", opts: IntermediateOptions{ClusterDomain: "cluster.local"}, want: "no key given"},
		{name: "no cluster domain", key: testKey(t, string(ECDSAP256)), want: "cluster domain"},
		{name: "bad cluster domain", key: testKey(t, string(ECDSAP256)), opts: IntermediateOptions{ClusterDomain: "Cluster.Local"}, want: "cluster domain"},
		{name: "P-521 key", key: testKey(t, keyP521), opts: IntermediateOptions{ClusterDomain: "cluster.local"}, want: "ECDSA P-521; accepted: " + AcceptedKeys},
		{name: "RSA 1024 key", key: testKey(t, keyRSA1024), opts: IntermediateOptions{ClusterDomain: "cluster.local"}, want: "RSA 1024 bits; accepted"},
		{name: "long common name", key: testKey(t, string(ECDSAP256)), opts: IntermediateOptions{ClusterDomain: "cluster.local", CommonName: strings.Repeat("c", 65)}, want: "at most 64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := IntermediateRequest(tt.key, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("IntermediateRequest error %v, want one containing %q", err, tt.want)
			}
			if out != nil {
				t.Fatal("a request came back with the error")
			}
		})
	}
}

// TestCheckIntermediate runs every refusal and warning of CheckIntermediate.
func TestCheckIntermediate(t *testing.T) {
	key := testKey(t, string(ECDSAP256))
	csr := intermediateCSR(t, key)
	root := newTestRoot(t, "Example Root", "P384", nil)
	good := root.signCSR(t, csr, nil)
	org := root.subCA(t, "Example Org Intermediate", nil)
	underOrg := org.signCSR(t, csr, nil)
	otherRoot := newTestRoot(t, "Other Root", "P256", nil)
	signed := func(tweak func(*x509.Certificate)) []byte { return bundleOf(root.signCSR(t, csr, tweak)) }
	// certapi's constraints as template fields, to change one of them.
	constraints := func(change func(*x509.Certificate)) func(*x509.Certificate) {
		return func(tmpl *x509.Certificate) {
			dropExtension(tmpl, oidExtNameConstraints)
			setCAConstraints(tmpl, "cluster.local")
			tmpl.ExtKeyUsage = nil // the requested extension stays
			change(tmpl)
		}
	}
	otherKey := testKey(t, string(ECDSAP384))
	p521 := testKey(t, keyP521)
	p521CSR := func() []byte {
		exts, err := intermediateExtensions("cluster.local")
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: CACommonNamePrefix + "1"}, ExtraExtensions: exts}, p521)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}()
	selfSignedByKey := func() []byte {
		tmpl := upstreamCATemplate(t, CACommonNamePrefix+"1", key.Public())
		tmpl.NotBefore, tmpl.NotAfter = testNow.Add(-time.Hour), testNow.Add(365*24*time.Hour)
		setCAConstraints(tmpl, "cluster.local")
		return bundleOf(createCert(t, tmpl, tmpl, key.Public(), key))
	}()
	impostorSameName := newTestRoot(t, "Example Root", "P384", nil)
	impostorSameKeyID := newTestRoot(t, "Example Root", "P384", func(c *x509.Certificate) { c.SubjectKeyId = root.cert.SubjectKeyId })

	tests := []struct {
		name         string
		cert, chain  []byte
		key          crypto.Signer
		opts         func(*ImportOptions)
		wantProblems []ImportReason
		wantWarnings []ImportReason
		wantText     []string
	}{
		{name: "good, root in the chain", cert: bundleOf(good), chain: bundleOf(root.cert)},
		{name: "good, root among the roots given", cert: bundleOf(good), opts: func(o *ImportOptions) { o.RootsPEM = bundleOf(otherRoot.cert, root.cert) }},
		{name: "good, chain after the certificate", cert: bundleOf(good, root.cert)},
		{name: "good, the certificate repeated in the chain", cert: bundleOf(good), chain: bundleOf(good, root.cert, root.cert)},
		{name: "good, valid within the clock tolerance", cert: signed(func(c *x509.Certificate) { c.NotBefore = testNow.Add(time.Minute) }), chain: bundleOf(root.cert)},
		{
			name: "certificate for another key", cert: bundleOf(root.signCSR(t, intermediateCSR(t, otherKey), nil)), chain: bundleOf(root.cert),
			wantProblems: []ImportReason{ReasonKeyMismatch},
			wantText:     []string{"certifies the public key ECDSA P-384 with key identifier", "not the CA key's (ECDSA P-256 with key identifier"},
		},
		{
			name: "unsupported CA key", cert: bundleOf(root.signCSR(t, p521CSR, nil)), chain: bundleOf(root.cert), key: p521,
			wantProblems: []ImportReason{ReasonUnsupportedKey},
			wantText:     []string{"the CA key: unsupported key: ECDSA P-521; accepted: " + AcceptedKeys, "the certificate's key: unsupported key: ECDSA P-521"},
		},
		{
			name: "not a CA", chain: bundleOf(root.cert),
			cert:         signed(func(c *x509.Certificate) { dropExtension(c, oidExtBasicConstraints); c.BasicConstraintsValid = true }),
			wantProblems: []ImportReason{ReasonNotCA},
			wantText:     []string{"not a CA (no basic constraints with cA true); accepted: basicConstraints critical, CA:TRUE, pathlen:0"},
		},
		{
			name: "no basic constraints", chain: bundleOf(root.cert),
			cert:         signed(func(c *x509.Certificate) { dropExtension(c, oidExtBasicConstraints) }),
			wantProblems: []ImportReason{ReasonNotCA},
		},
		{
			name: "no keyCertSign", chain: bundleOf(root.cert),
			cert: signed(func(c *x509.Certificate) {
				dropExtension(c, oidExtKeyUsage)
				c.KeyUsage = x509.KeyUsageDigitalSignature
			}),
			wantProblems: []ImportReason{ReasonKeyUsage},
			wantText:     []string{"does not include keyCertSign", "accepted: key usage with keyCertSign"},
		},
		{
			name: "no key usage", chain: bundleOf(root.cert),
			cert:         signed(func(c *x509.Certificate) { dropExtension(c, oidExtKeyUsage) }),
			wantWarnings: []ImportReason{ReasonKeyUsage},
			wantText:     []string{"no key usage extension"},
		},
		{
			name: "no path length limit", chain: bundleOf(root.cert),
			cert: signed(func(c *x509.Certificate) {
				dropExtension(c, oidExtBasicConstraints)
				c.BasicConstraintsValid, c.IsCA, c.MaxPathLen = true, true, -1
			}),
			wantWarnings: []ImportReason{ReasonPathLength},
			wantText:     []string{"no path length limit, so the CA key could sign CAs below it"},
		},
		{
			name: "path length 2", chain: bundleOf(root.cert),
			cert: signed(func(c *x509.Certificate) {
				dropExtension(c, oidExtBasicConstraints)
				c.BasicConstraintsValid, c.IsCA, c.MaxPathLen = true, true, 2
			}),
			wantWarnings: []ImportReason{ReasonPathLength},
			wantText:     []string{"path length 2"},
		},
		{
			name: "no name constraints", chain: bundleOf(root.cert),
			cert:         signed(func(c *x509.Certificate) { dropExtension(c, oidExtNameConstraints) }),
			wantProblems: []ImportReason{ReasonNameConstraints},
			wantText: []string{
				`permitted DNS subtree "svc" missing`, `permitted DNS subtree "svc.cluster.local" missing`,
				"excluded IP range 0.0.0.0/0 missing", "excluded IP range ::/0 missing",
				`permitted URI subtree "invalid" missing`, `excluded URI subtree "invalid" missing`,
				`permitted e-mail subtree "invalid" missing`, `excluded e-mail subtree "invalid" missing`,
				"to import it anyway, allow wider constraints",
			},
		},
		{
			name: "no name constraints, wider accepted", chain: bundleOf(root.cert),
			cert:         signed(func(c *x509.Certificate) { dropExtension(c, oidExtNameConstraints) }),
			opts:         func(o *ImportOptions) { o.AcceptWiderConstraints = true },
			wantWarnings: []ImportReason{ReasonNameConstraints},
			wantText:     []string{`permitted DNS subtree "svc" missing`, "accepted because wider constraints are allowed"},
		},
		{
			name: "a DNS subtree beyond certapi's", chain: bundleOf(root.cert),
			cert: signed(constraints(func(c *x509.Certificate) {
				c.PermittedDNSDomains = append(c.PermittedDNSDomains, "example.com", ".svc")
			})),
			wantProblems: []ImportReason{ReasonNameConstraints},
			wantText:     []string{`permitted DNS subtree "example.com" is outside certapi's ("svc", "svc.cluster.local")`},
		},
		{
			name: "name constraints not critical", chain: bundleOf(root.cert),
			cert:         signed(constraints(func(c *x509.Certificate) { c.PermittedDNSDomainsCritical = false })),
			wantProblems: []ImportReason{ReasonNameConstraints},
			wantText:     []string{"the name constraints extension is not critical"},
		},
		{
			name: "IPv6 addresses allowed", chain: bundleOf(root.cert),
			cert:         signed(constraints(func(c *x509.Certificate) { c.ExcludedIPRanges = c.ExcludedIPRanges[:1] })),
			wantProblems: []ImportReason{ReasonNameConstraints},
			wantText:     []string{"excluded IP range ::/0 missing"},
		},
		{
			name: "URIs under a domain allowed", chain: bundleOf(root.cert),
			cert:         signed(constraints(func(c *x509.Certificate) { c.PermittedURIDomains = []string{"example.com"}; c.ExcludedURIDomains = nil })),
			wantProblems: []ImportReason{ReasonNameConstraints},
			wantText:     []string{`permitted URI subtree "invalid" missing`, `permitted URI subtree "example.com" is more than certapi's`, `excluded URI subtree "invalid" missing`},
		},
		{
			name: "DNS too narrow", chain: bundleOf(root.cert),
			cert:         signed(constraints(func(c *x509.Certificate) { c.PermittedDNSDomains = []string{"svc.cluster.local", "team-a.svc"} })),
			opts:         func(o *ImportOptions) { o.AcceptWiderConstraints = true },
			wantProblems: []ImportReason{ReasonNameConstraintsTooNarrow},
			wantText:     []string{`no permitted DNS subtree covers "svc" (permitted: "svc.cluster.local", "team-a.svc")`},
		},
		{
			name: "excluded DNS subtree covers the cluster domain", chain: bundleOf(root.cert),
			cert:         signed(constraints(func(c *x509.Certificate) { c.ExcludedDNSDomains = []string{"cluster.local"} })),
			wantProblems: []ImportReason{ReasonNameConstraintsTooNarrow},
			wantText:     []string{`excluded DNS subtree "cluster.local" excludes every name under "svc.cluster.local"`},
		},
		{
			name: "another cluster domain", cert: bundleOf(good), chain: bundleOf(root.cert),
			opts:         func(o *ImportOptions) { o.ClusterDomain = "corp.example" },
			wantProblems: []ImportReason{ReasonNameConstraints, ReasonNameConstraintsTooNarrow},
			wantText:     []string{`permitted DNS subtree "svc.cluster.local" is outside certapi's ("svc", "svc.corp.example")`, `no permitted DNS subtree covers "svc.corp.example"`},
		},
		{
			name: "expires too soon", chain: bundleOf(root.cert),
			cert:         signed(func(c *x509.Certificate) { c.NotAfter = testNow.Add(10 * 24 * time.Hour) }),
			wantProblems: []ImportReason{ReasonExpiresTooSoon},
			wantText:     []string{"the certificate is valid until 2030-03-14T12:00:00Z, 10d0h from now; accepted: at least 30d0h of validity left"},
		},
		{
			name: "expires within a shorter minimum", chain: bundleOf(root.cert),
			cert: signed(func(c *x509.Certificate) { c.NotAfter = testNow.Add(10 * 24 * time.Hour) }),
			opts: func(o *ImportOptions) { o.MinRemaining = 7 * 24 * time.Hour },
		},
		{
			name: "expired", chain: bundleOf(root.cert),
			cert: signed(func(c *x509.Certificate) {
				c.NotBefore, c.NotAfter = testNow.Add(-48*time.Hour), testNow.Add(-time.Minute)
			}),
			wantProblems: []ImportReason{ReasonExpiresTooSoon},
			wantText:     []string{"the certificate expired at 2030-03-04T11:59:00Z"},
		},
		{
			name: "not yet valid", chain: bundleOf(root.cert),
			cert:         signed(func(c *x509.Certificate) { c.NotBefore = testNow.Add(3 * time.Hour) }),
			wantProblems: []ImportReason{ReasonNotYetValid},
			wantText:     []string{"not valid until 2030-03-04T15:00:00Z, 3h0m0s from now; accepted: a certificate valid now (clocks may differ by up to 5m0s)"},
		},
		{
			name: "no subject key identifier", chain: bundleOf(root.cert),
			cert:         signed(func(c *x509.Certificate) { c.SubjectKeyId = nil }),
			wantProblems: []ImportReason{ReasonNoSubjectKeyID},
			wantText:     []string{"no subject key identifier", "subjectKeyIdentifier=hash"},
		},
		{
			name: "client authentication only", chain: bundleOf(root.cert),
			cert: signed(func(c *x509.Certificate) {
				dropExtension(c, oidExtExtKeyUsage)
				c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
			}),
			wantProblems: []ImportReason{ReasonExtKeyUsage},
			wantText:     []string{"extended key usages without serverAuth"},
		},
		{
			name: "no extended key usage", chain: bundleOf(root.cert),
			cert:         signed(func(c *x509.Certificate) { dropExtension(c, oidExtExtKeyUsage) }),
			wantWarnings: []ImportReason{ReasonExtKeyUsage},
			wantText:     []string{"no extended key usage"},
		},
		{
			name: "client authentication too", chain: bundleOf(root.cert),
			cert: signed(func(c *x509.Certificate) {
				dropExtension(c, oidExtExtKeyUsage)
				c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
			}),
			wantWarnings: []ImportReason{ReasonExtKeyUsage},
			wantText:     []string{"1 extended key usage(s) besides serverAuth"},
		},
		{
			name: "common name without certapi's prefix", chain: bundleOf(root.cert),
			cert:         signed(func(c *x509.Certificate) { c.Subject = pkix.Name{CommonName: "corp-issued"} }),
			wantWarnings: []ImportReason{ReasonSubject},
			wantText:     []string{`common name "corp-issued" does not start with "certapi-ca@"`},
		},
		{
			name: "an unrelated certificate in the chain", cert: bundleOf(good), chain: bundleOf(otherRoot.cert, root.cert),
			wantWarnings: []ImportReason{ReasonUnusedCertificate},
			wantText:     []string{`"CN=Other Root,O=Example Org" (serial`, "is not on the path"},
		},
		{
			name: "intermediate missing", cert: bundleOf(underOrg), chain: bundleOf(root.cert),
			wantProblems: []ImportReason{ReasonChain},
			wantText:     []string{`link 1: "CN=certapi-ca@`, `was issued by "CN=Example Org Intermediate,O=Example Org", and no certificate of that subject is in the chain or among the roots given`},
		},
		{
			name: "root missing", cert: bundleOf(underOrg), chain: bundleOf(org.cert),
			wantProblems: []ImportReason{ReasonChain},
			wantText:     []string{`link 2: "CN=Example Org Intermediate,O=Example Org" (serial`, `was issued by "CN=Example Root,O=Example Org"`},
		},
		{
			name: "no chain at all", cert: bundleOf(good),
			wantProblems: []ImportReason{ReasonChain},
			wantText:     []string{"link 1:", "accepted: the chain up to the root, with the root in it or among the roots given"},
		},
		{
			name: "a root of the same name with another key", cert: bundleOf(good), chain: bundleOf(impostorSameName.cert),
			wantProblems: []ImportReason{ReasonChain},
			wantText:     []string{"has the issuer's name but key identifier"},
		},
		{
			name: "a root of the same name and key identifier with another key", cert: bundleOf(good), chain: bundleOf(impostorSameKeyID.cert),
			wantProblems: []ImportReason{ReasonChain},
			wantText:     []string{"link 1: the signature of", "does not verify with the key of"},
		},
		{
			name: "a root not among the roots given", cert: bundleOf(good), chain: bundleOf(root.cert),
			opts:         func(o *ImportOptions) { o.RootsPEM = bundleOf(otherRoot.cert) },
			wantProblems: []ImportReason{ReasonChain},
			wantText:     []string{`the chain ends at the self-signed "CN=Example Root,O=Example Org"`, "which is not among the roots given; accepted: a chain to one of the roots given (\"CN=Other Root"},
		},
		{
			name: "a self-signed certificate", cert: selfSignedByKey,
			wantProblems: []ImportReason{ReasonChain},
			wantText:     []string{"the certificate is self-signed; accepted: a certificate signed by the organisation's CA"},
		},
		{
			name: "an intermediate that may sign no CA",
			cert: func() []byte {
				leafOnly := root.subCA(t, "Leaf-only Intermediate", func(c *x509.Certificate) { c.MaxPathLen, c.MaxPathLenZero = 0, true })
				return bundleOf(leafOnly.signCSR(t, csr, nil), leafOnly.cert, root.cert)
			}(),
			wantProblems: []ImportReason{ReasonChain},
			wantText:     []string{`link 1: "CN=Leaf-only Intermediate,O=Example Org" (serial`, "in the chain has path length 0, but 1 CA certificate(s) would be below it"},
		},
		{
			name: "a root that may sign one CA, over two", cert: func() []byte {
				r := newTestRoot(t, "Shallow Root", "P256", func(c *x509.Certificate) { c.MaxPathLen = 1 })
				o := r.subCA(t, "Shallow Org", nil)
				underShallow := o.signCSR(t, csr, nil)
				return bundleOf(underShallow, o.cert, r.cert)
			}(),
			wantProblems: []ImportReason{ReasonChain},
			wantText:     []string{"link 2: \"CN=Shallow Root", "has path length 1, but 2 CA certificate(s) would be below it"},
		},
		{
			name: "an intermediate expiring soon",
			cert: func() []byte {
				short := root.subCA(t, "Short Intermediate", func(c *x509.Certificate) { c.NotAfter = testNow.Add(5 * 24 * time.Hour) })
				return bundleOf(short.signCSR(t, csr, nil), short.cert, root.cert)
			}(),
			wantProblems: []ImportReason{ReasonExpiresTooSoon},
			wantText:     []string{`"CN=Short Intermediate,O=Example Org" (serial`, "in its chain is valid until 2030-03-09T12:00:00Z, 5d0h from now"},
		},
		{
			name: "an expired intermediate",
			cert: func() []byte {
				old := root.subCA(t, "Old Intermediate", func(c *x509.Certificate) { c.NotAfter = testNow.Add(-time.Hour) })
				return bundleOf(old.signCSR(t, csr, nil), old.cert, root.cert)
			}(),
			wantProblems: []ImportReason{ReasonChain, ReasonExpiresTooSoon},
			wantText:     []string{`"CN=Old Intermediate,O=Example Org" (serial`, "in the chain expired at 2030-03-04T11:00:00Z; accepted: a chain valid now"},
		},
		{
			name: "a root for client authentication only",
			cert: func() []byte {
				r := newTestRoot(t, "Client Root", "P256", func(c *x509.Certificate) { c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth} })
				return bundleOf(r.signCSR(t, csr, nil), r.cert)
			}(),
			wantProblems: []ImportReason{ReasonExtKeyUsage},
			wantText:     []string{`"CN=Client Root,O=Example Org" (serial`, "in the chain has extended key usages without serverAuth"},
		},
		{
			name: "a root constrained to another domain",
			cert: func() []byte {
				r := newTestRoot(t, "Corp Root", "P256", func(c *x509.Certificate) {
					c.PermittedDNSDomainsCritical, c.PermittedDNSDomains = true, []string{"corp.example"}
				})
				return bundleOf(r.signCSR(t, csr, nil), r.cert)
			}(),
			wantProblems: []ImportReason{ReasonNameConstraintsTooNarrow},
			wantText:     []string{`"CN=Corp Root,O=Example Org" (serial`, `no permitted DNS subtree covers "svc" (permitted: "corp.example")`},
		},
		{
			name: "a root with an RSA 1024 key",
			cert: func() []byte {
				r := newTestRoot(t, "Weak Root", keyRSA1024, nil)
				return bundleOf(r.signCSR(t, csr, nil), r.cert)
			}(),
			wantProblems: []ImportReason{ReasonUnsupportedKey},
			wantText:     []string{"has an RSA key of 1024 bits; accepted: at least 2048"},
		},
		{
			name: "several problems at once", chain: bundleOf(root.cert),
			cert: signed(func(c *x509.Certificate) {
				dropExtension(c, oidExtNameConstraints)
				c.NotAfter = testNow.Add(24 * time.Hour)
				c.SubjectKeyId = nil
			}),
			wantProblems: []ImportReason{ReasonNameConstraints, ReasonNoSubjectKeyID, ReasonExpiresTooSoon},
			wantText:     []string{"3 problems: (1) "},
		},
		{name: "empty", wantProblems: []ImportReason{ReasonMalformed}, wantText: []string{"the signed certificate: parsing certificate bundle: no certificate found"}},
		{name: "not PEM", cert: []byte("hello"), wantProblems: []ImportReason{ReasonMalformed}},
		{
			name: "a key in the chain", cert: bundleOf(good), chain: mustKeyPEM(t, otherKey),
			wantProblems: []ImportReason{ReasonMalformed},
			wantText:     []string{`the chain: parsing certificate bundle: block 1 has type "PRIVATE KEY"; expected PEM blocks of type CERTIFICATE`},
		},
		{
			name: "a damaged root", cert: bundleOf(good),
			opts: func(o *ImportOptions) {
				o.RootsPEM = []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
			},
			wantProblems: []ImportReason{ReasonMalformed},
			wantText:     []string{"the roots: parsing certificate bundle: certificate 1"},
		},
		{
			name: "too large", cert: append(bundleOf(good), bytes.Repeat([]byte(" "), MaxImportBytes)...),
			wantProblems: []ImportReason{ReasonMalformed},
			wantText:     []string{"accepted: at most 262144"},
		},
		{
			name: "too long a chain", cert: bundleOf(good), chain: func() []byte {
				var certs []*x509.Certificate
				for range MaxChainLength + 1 {
					certs = append(certs, newTestRoot(t, "Many", "P256", nil).cert)
				}
				return bundleOf(certs...)
			}(),
			wantProblems: []ImportReason{ReasonMalformed},
			wantText:     []string{"the chain holds 9 certificates; accepted: at most 8"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := importOpts()
			if tt.opts != nil {
				tt.opts(&opts)
			}
			k := tt.key
			if k == nil {
				k = key
			}
			ca, warnings, err := CheckIntermediate(tt.cert, tt.chain, k, opts)
			var text string
			if len(tt.wantProblems) > 0 {
				var ie *IntermediateError
				if !errors.As(err, &ie) || !errors.Is(err, ErrIntermediateRefused) {
					t.Fatalf("CheckIntermediate error %v (%T), want an *IntermediateError", err, err)
				}
				if ca != nil || warnings != nil {
					t.Fatal("a CA or warnings came back with the refusal")
				}
				if got := reasons(ie.Problems); !slices.Equal(got, sortedReasons(tt.wantProblems)) {
					t.Errorf("problems %v, want %v; error: %v", got, sortedReasons(tt.wantProblems), err)
				}
				text = err.Error()
			} else {
				if err != nil {
					t.Fatalf("CheckIntermediate: %v", err)
				}
				if got := reasons(warnings); !slices.Equal(got, sortedReasons(tt.wantWarnings)) {
					t.Errorf("warnings %v, want %v: %v", got, sortedReasons(tt.wantWarnings), warnings)
				}
				for _, w := range warnings {
					text += w.String() + "\n"
				}
				checkImported(t, ca, k)
			}
			for _, want := range tt.wantText {
				if !strings.Contains(text, want) {
					t.Errorf("%q not in\n%s", want, text)
				}
			}
			for _, k := range []crypto.Signer{key, otherKey, p521} {
				if body := keyPEMBody(t, k); strings.Contains(text, body) {
					t.Errorf("the findings hold key material: %s", text)
				}
			}
		})
	}
}

// TestCheckIntermediateOptions checks the errors about the call itself.
func TestCheckIntermediateOptions(t *testing.T) {
	key := testKey(t, string(ECDSAP256))
	root := newTestRoot(t, "Example Root", "P256", nil)
	cert := bundleOf(root.signCSR(t, intermediateCSR(t, key), nil), root.cert)
	for name, tc := range map[string]struct {
		key  crypto.Signer
		opts ImportOptions
		want string
	}{
		"no key":            {opts: importOpts(), want: "no CA key given"},
		"no cluster domain": {key: key, opts: ImportOptions{Now: testNow}, want: "cluster domain"},
		"negative minimum":  {key: key, opts: ImportOptions{ClusterDomain: "cluster.local", MinRemaining: -time.Hour}, want: "is negative"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := CheckIntermediate(cert, nil, tc.key, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, ErrIntermediateRefused) {
				t.Fatalf("error %v, want a call error containing %q", err, tc.want)
			}
		})
	}
}

func reasons(fs []Finding) []ImportReason {
	var out []ImportReason
	for _, f := range fs {
		out = append(out, f.Reason)
	}
	return sortedReasons(out)
}

func sortedReasons(rs []ImportReason) []ImportReason {
	out := slices.Clone(rs)
	slices.Sort(out)
	return slices.Compact(out)
}

// keyPEMBody returns the first line of base64 of key's PEM encoding.
func keyPEMBody(tb testing.TB, key crypto.Signer) string {
	tb.Helper()
	lines := strings.Split(string(mustKeyPEM(tb, key)), "\n")
	return lines[1]
}

func mustKeyPEM(tb testing.TB, key crypto.Signer) []byte {
	tb.Helper()
	p, err := EncodeKeyPEM(key)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// checkImported checks what every imported CA must be: its key, a chain
// ending at a root whose every link verifies, and a leaf that Go verifies
// through the served chain.
func checkImported(t *testing.T, ca *CA, key crypto.Signer) {
	t.Helper()
	if ca == nil {
		t.Fatal("no CA came back")
	}
	if ca.Key != key {
		t.Error("the CA does not sign with the key given")
	}
	if ca.SelfSigned() || len(ca.Chain) == 0 {
		t.Fatal("the imported CA carries no chain")
	}
	below := ca.Certificate
	for i, c := range ca.Chain {
		if err := below.CheckSignatureFrom(c); err != nil {
			t.Fatalf("chain certificate %d did not sign the one below it: %v", i+1, err)
		}
		below = c
	}
	at := latest(testNow, ca.Certificate.NotBefore)
	leaf := signTestLeaf(t, ca, at)
	if err := verifyServed(leaf.CertificatePEM, at, ca.Root()); err != nil {
		t.Errorf("a leaf does not verify against the root: %v", err)
	}
	if err := verifyServed(leaf.CertificatePEM, at, ca.Certificate); err != nil {
		t.Errorf("a leaf does not verify against the intermediate: %v", err)
	}
}

// signTestLeaf signs a leaf for web.ns at now.
func signTestLeaf(t *testing.T, ca *CA, now time.Time) *Leaf {
	t.Helper()
	leaf, err := ca.Sign(LeafRequest{ServiceName: "web", Namespace: "ns", ClusterDomain: "cluster.local",
		PublicKey: testKey(t, string(ECDSAP384)).Public(), Duration: 24 * time.Hour, Now: now})
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	return leaf
}

// verifyServed verifies a served chain (leaf first) as a TLS client that
// trusts only anchors would, for web.ns.svc at the time at.
func verifyServed(servedPEM []byte, at time.Time, anchors ...*x509.Certificate) error {
	certs, err := ParseBundle(servedPEM)
	if err != nil {
		return err
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, a := range anchors {
		roots.AddCert(a)
	}
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err = certs[0].Verify(x509.VerifyOptions{DNSName: "web.ns.svc", Roots: roots, Intermediates: inter, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}
