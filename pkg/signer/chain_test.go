package signer

import (
	"bytes"
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestImportedCAServesItsChain imports certapi's CA under several kinds of
// organisation's hierarchy and checks that a leaf it signs is served with
// the intermediates and verifies, with Go's verifier, for a client that
// trusts only the root and for one that trusts only certapi's intermediate,
// and for no client that trusts neither.
func TestImportedCAServesItsChain(t *testing.T) {
	key := testKey(t, string(ECDSAP256))
	csr := intermediateCSR(t, key)
	unrelated := newTestCA(t, testNow, 0).Certificate

	ecRoot := newTestRoot(t, "EC Root", "P384", nil)
	rsaRoot := newTestRoot(t, "RSA Root", "RSA", nil)
	constrainedRoot := newTestRoot(t, "Constrained Root", "P256", func(c *x509.Certificate) {
		// An organisation's root limited to its own domain and every cluster's services.
		c.PermittedDNSDomainsCritical = true
		c.PermittedDNSDomains = []string{"corp.example", "svc", "svc.cluster.local"}
		c.ExcludedIPRanges = excludedIPRanges()
	})
	orgRoot := newTestRoot(t, "Org Root", "P384", func(c *x509.Certificate) { c.MaxPathLen = 2 })
	orgInter := orgRoot.subCA(t, "Org Intermediate", func(c *x509.Certificate) {
		c.MaxPathLen = 1
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	})

	tests := []struct {
		name      string
		cert      *x509.Certificate
		chain     []*x509.Certificate // given to CheckIntermediate
		roots     []*x509.Certificate // ImportOptions.RootsPEM
		wantChain []*x509.Certificate // CA.Chain
		wantServe []*x509.Certificate // after the leaf
	}{
		{name: "ECDSA root", cert: ecRoot.signCSR(t, csr, nil), chain: []*x509.Certificate{ecRoot.cert}, wantChain: []*x509.Certificate{ecRoot.cert}},
		{name: "RSA root", cert: rsaRoot.signCSR(t, csr, nil), roots: []*x509.Certificate{rsaRoot.cert}, wantChain: []*x509.Certificate{rsaRoot.cert}},
		{name: "root with name constraints of its own", cert: constrainedRoot.signCSR(t, csr, nil), chain: []*x509.Certificate{constrainedRoot.cert}, wantChain: []*x509.Certificate{constrainedRoot.cert}},
		{
			name: "root, organisation's intermediate, certapi's", cert: orgInter.signCSR(t, csr, nil),
			chain:     []*x509.Certificate{orgRoot.cert, orgInter.cert}, // out of order, as upstreams sometimes send them
			wantChain: []*x509.Certificate{orgInter.cert, orgRoot.cert}, wantServe: []*x509.Certificate{orgInter.cert},
		},
		{
			name: "organisation's intermediate pinned as the root", cert: orgInter.signCSR(t, csr, nil),
			roots: []*x509.Certificate{orgInter.cert}, wantChain: []*x509.Certificate{orgInter.cert}, wantServe: []*x509.Certificate{orgInter.cert},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := importOpts()
			opts.RootsPEM = bundleOf(tt.roots...)
			ca, warnings := mustImport(t, tt.cert, tt.chain, key, opts)
			if len(warnings) > 0 {
				t.Errorf("warnings: %v", warnings)
			}
			if !slices.EqualFunc(ca.Chain, tt.wantChain, (*x509.Certificate).Equal) {
				t.Fatalf("Chain has %d certificates, want %d in order", len(ca.Chain), len(tt.wantChain))
			}
			if ca.Root() != ca.Chain[len(ca.Chain)-1] {
				t.Error("Root is not the last of Chain")
			}
			leaf := signTestLeaf(t, ca, testNow)
			served, err := ParseBundle(leaf.CertificatePEM)
			if err != nil {
				t.Fatal(err)
			}
			wantServed := append([]*x509.Certificate{ca.Certificate}, tt.wantServe...)
			if !served[0].Equal(leaf.Certificate) || !slices.EqualFunc(served[1:], wantServed, (*x509.Certificate).Equal) {
				t.Errorf("served %d certificates after the leaf, want certapi's CA and %d intermediate(s) (never the root)", len(served)-1, len(tt.wantServe))
			}
			if err := verifyServed(leaf.CertificatePEM, testNow, ca.Root()); err != nil {
				t.Errorf("does not verify for a client that trusts the root only: %v", err)
			}
			if err := verifyServed(leaf.CertificatePEM, testNow, ca.Certificate); err != nil {
				t.Errorf("does not verify for a client that trusts certapi's intermediate only: %v", err)
			}
			if err := verifyServed(leaf.CertificatePEM, testNow, unrelated); err == nil {
				t.Error("verifies for a client that trusts neither")
			}
			// The leaf alone, without the chain it is served with, verifies only against the intermediate.
			alone := bundleOf(served[0])
			if err := verifyServed(alone, testNow, ca.Root()); err == nil {
				t.Error("the leaf alone verifies against the root: the served chain would not be needed")
			}
		})
	}
}

// TestSelfSignedCAUnchanged checks that a CA certapi made itself serves and
// publishes exactly what it did before CAs could carry chains.
func TestSelfSignedCAUnchanged(t *testing.T) {
	ca := newTestCA(t, testNow, 0)
	if !ca.SelfSigned() || ca.ServedChain() != nil || ca.ChainPEM() != nil || ca.Root() != ca.Certificate {
		t.Fatal("a self-signed CA reports a chain")
	}
	if !ca.ChainNotAfter().Equal(ca.Certificate.NotAfter) {
		t.Errorf("ChainNotAfter=%s, want the certificate's notAfter", ca.ChainNotAfter())
	}
	leaf := signTestLeaf(t, ca, testNow)
	if want := bundleOf(leaf.Certificate); !bytes.Equal(leaf.CertificatePEM, want) {
		t.Errorf("CertificatePEM is not the leaf alone:\n%s", leaf.CertificatePEM)
	}
	a := Authorities{Active: ca, Next: newTestCA(t, testNow, 0), Retiring: []Retiring{{CA: newTestCA(t, testNow, 0).WithoutKey()}}}
	for _, anchor := range []BundleAnchor{AnchorRoot, AnchorIntermediate, ""} {
		if !bytes.Equal(a.BundleFor(anchor), a.Bundle()) {
			t.Errorf("BundleFor(%q) differs from Bundle for self-signed CAs", anchor)
		}
	}
}

// TestSignUnderAChain checks what Sign adds for a CA with a chain: a leaf
// ends with the earliest certificate of the chain, and names the chain's
// constraints refuse are refused.
func TestSignUnderAChain(t *testing.T) {
	key := testKey(t, string(ECDSAP256))
	csr := intermediateCSR(t, key)
	root := newTestRoot(t, "Root", "P256", func(c *x509.Certificate) {
		c.PermittedDNSDomainsCritical = true
		c.PermittedDNSDomains = []string{"svc", "svc.cluster.local"}
		c.ExcludedDNSDomains = []string{"kube-system.svc"}
	})
	org := root.subCA(t, "Org", func(c *x509.Certificate) { c.NotAfter = testNow.Add(40 * 24 * time.Hour) })
	ca, _ := mustImport(t, org.signCSR(t, csr, nil), []*x509.Certificate{org.cert, root.cert}, key, importOpts())

	leaf, err := ca.Sign(LeafRequest{ServiceName: "web", Namespace: "ns", ClusterDomain: "cluster.local",
		PublicKey: testKey(t, string(ECDSAP384)).Public(), Duration: 90 * 24 * time.Hour, Now: testNow})
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	if !leaf.NotAfter.Equal(org.cert.NotAfter) || !leaf.Certificate.NotAfter.Equal(org.cert.NotAfter) {
		t.Errorf("leaf notAfter %s, want the organisation's intermediate's %s", leaf.NotAfter, org.cert.NotAfter)
	}
	_, err = ca.Sign(LeafRequest{ServiceName: "web", Namespace: "kube-system", ClusterDomain: "cluster.local",
		PublicKey: testKey(t, string(ECDSAP384)).Public(), Duration: time.Hour, Now: testNow})
	if err == nil || !strings.Contains(err.Error(), `"CN=Root,O=Example Org"`) || !strings.Contains(err.Error(), "excluded by the CA's name constraints") {
		t.Errorf("Sign for a name the root excludes: error %v, want one naming the root's constraints", err)
	}
	_, err = ca.Sign(LeafRequest{ServiceName: "web", Namespace: "ns", ClusterDomain: "cluster.local",
		PublicKey: testKey(t, string(ECDSAP384)).Public(), Duration: time.Hour, Now: org.cert.NotAfter.Add(time.Second)})
	if err == nil || !strings.Contains(err.Error(), "a certificate of the CA's chain expired at") {
		t.Errorf("Sign after the chain expired: error %v", err)
	}
}

func TestWithChain(t *testing.T) {
	key := testKey(t, string(ECDSAP256))
	root := newTestRoot(t, "Root", "P256", nil)
	org := root.subCA(t, "Org", nil)
	ca, _ := mustImport(t, org.signCSR(t, intermediateCSR(t, key), nil), []*x509.Certificate{org.cert, root.cert}, key, importOpts())

	// Stored as certificate, chain and key, it loads back as it was.
	loaded, err := (&CA{Certificate: ca.Certificate, Key: key}).WithChain(ca.ChainPEM())
	if err != nil {
		t.Fatalf("WithChain: %v", err)
	}
	if !slices.EqualFunc(loaded.Chain, ca.Chain, (*x509.Certificate).Equal) || loaded.Key != key {
		t.Fatal("the loaded CA differs from the imported one")
	}
	if !bytes.Equal(loaded.WithoutKey().ChainPEM(), ca.ChainPEM()) || loaded.WithoutKey().Key != nil {
		t.Error("WithoutKey does not keep the chain, or keeps the key")
	}
	if self, err := loaded.WithChain(nil); err != nil || !self.SelfSigned() {
		t.Errorf("WithChain(nil) = %v, %v; want a copy with no chain", self, err)
	}
	for name, tc := range map[string]struct {
		chain []byte
		want  string
	}{
		"out of order": {chain: bundleOf(root.cert, org.cert), want: `certificate 1 ("CN=Root,O=Example Org" (serial`},
		"another root": {chain: bundleOf(org.cert, newTestRoot(t, "Root", "P256", nil).cert), want: "certificate 2"},
		"not PEM":      {chain: []byte("junk -----BEGIN CERTIFICATE-----\n"), want: "malformed PEM block 1"},
		"far too many": {chain: bytes.Repeat(bundleOf(org.cert), MaxChainLength+1), want: "accepted: at most 8"},
		"a leaf in it": {chain: bundleOf(signTestLeaf(t, ca, testNow).Certificate), want: "did not sign"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := (&CA{Certificate: ca.Certificate}).WithChain(tc.chain)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("WithChain error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
