package etcdcluster

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// verifyMember verifies a member certificate (PEM, with its chain) as a process that trusts roots does,
// for both ends of the members' mutual TLS.
func verifyMember(t *testing.T, certPEM []byte, now time.Time, roots ...*x509.Certificate) error {
	t.Helper()
	certs, err := signer.ParseBundle(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool, inter := x509.NewCertPool(), x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}, DNSName: "localhost"}); err != nil {
			return err
		}
	}
	return nil
}

// TestPeerCARotationTrust: across rotations, a process that loaded any earlier CA as its trust (etcd
// and certapi's storage client read it only at start) verifies the members' new certificates through
// the chain, and a process started later verifies the old members' certificates through the bundle.
func TestPeerCARotationTrust(t *testing.T) {
	now := time.Now()
	first, err := NewPeerCA(now, 90*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if first.Rotating() {
		t.Fatal("a new CA reports a rotation under way")
	}
	oldMember, err := first.IssueMember("certapi-0", nil, now, 0)
	if err != nil {
		t.Fatal(err)
	}

	second, err := first.Successor(now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Rotating() {
		t.Fatal("the successor does not report the rotation its bundle holds")
	}
	if _, err := second.Successor(now, 0); err == nil {
		t.Fatal("a successor was made while a rotation is under way")
	}
	bundle, err := signer.ParseBundle(second.TrustPEM())
	if err != nil || len(bundle) != 2 || !bundle[0].Equal(second.Certificate) || !bundle[1].Equal(first.Certificate) {
		t.Fatalf("bundle during the rotation: %d CAs (%v); want the new and the old", len(bundle), err)
	}
	chain, err := signer.ParseBundle(second.Chain)
	if err != nil || len(chain) != 1 || chain[0].NotAfter.After(first.Certificate.NotAfter) {
		t.Fatalf("chain: %d certificates (%v); want one, valid no longer than the old CA", len(chain), err)
	}
	newMember, err := second.IssueMember("certapi-1", nil, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := signer.ParseBundle(newMember.CertPEM)
	if !second.Signed(leaf[0]) || first.Signed(leaf[0]) {
		t.Fatal("the member certificate of the rotation is not signed by the new CA alone")
	}
	for _, tc := range []struct {
		what   string
		member []byte
		roots  []*x509.Certificate
	}{
		{"a process that trusts only the old CA, a new certificate", newMember.CertPEM, []*x509.Certificate{first.Certificate}},
		{"a process started during the rotation, an old certificate", oldMember.CertPEM, bundle},
		{"a process started during the rotation, a new certificate", newMember.CertPEM, bundle},
		{"a process started after it, a new certificate", newMember.CertPEM, []*x509.Certificate{second.Certificate}},
	} {
		if err := verifyMember(t, tc.member, now, tc.roots...); err != nil {
			t.Errorf("%s: %v", tc.what, err)
		}
	}
	if err := verifyMember(t, oldMember.CertPEM, now, second.Certificate); err == nil {
		t.Error("a process that trusts only the new CA verified a certificate of the old one")
	}

	settled := second.Settled()
	if settled.Rotating() || !settled.Certificate.Equal(second.Certificate) || string(settled.Chain) != string(second.Chain) {
		t.Fatal("Settled changed more than the bundle")
	}
	third, err := settled.Successor(now, 0)
	if err != nil {
		t.Fatal(err)
	}
	thirdMember, err := third.IssueMember("certapi-2", nil, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyMember(t, thirdMember.CertPEM, now, first.Certificate); err != nil {
		t.Errorf("a process that trusts only the first CA, after two rotations: %v", err)
	}
	if err := verifyMember(t, thirdMember.CertPEM, now, second.Certificate); err != nil {
		t.Errorf("a process that trusts only the second CA, after two rotations: %v", err)
	}
	later := first.Certificate.NotAfter.Add(time.Hour)
	lateMember, err := third.IssueMember("certapi-2", nil, later, 0)
	if err != nil {
		t.Fatal(err)
	}
	if certs, _ := signer.ParseBundle(lateMember.CertPEM); len(certs) != 2 {
		t.Errorf("a member certificate issued after the first CA expired carries %d certificates; want itself and the one bridge still valid", len(certs))
	}

	t.Log("the Secret's four keys load back into the same CA")
	keyPEM, err := third.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadPeerCA(third.CertificatePEM(), keyPEM, third.TrustPEM(), third.Chain)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Equal(third) {
		t.Error("LoadPeerCA gave another CA than was stored")
	}
	if _, err := LoadPeerCA(third.CertificatePEM(), keyPEM, third.TrustPEM(), first.CertificatePEM()); err == nil {
		t.Error("LoadPeerCA accepted a chain that does not vouch for the CA")
	}
}

// TestMemberFilesPairCertificateAndKey: the member's certificate, its chain and its key are one file,
// which Go's TLS reads as the certificate file and as the key file alike.
func TestMemberFilesPairCertificateAndKey(t *testing.T) {
	now := time.Now()
	first, err := NewPeerCA(now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := first.Successor(now, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	mc, err := ca.IssueMember("certapi-0", []string{"certapi-0.certapi-etcd.ns.svc"}, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := newPKIFiles(filepath.Join(dir, "etcd-pki"))
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "member.key"), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := f.write(mc, ca.TrustPEM()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "member.key")); !os.IsNotExist(err) {
		t.Errorf("the earlier version's key file is still there (%v)", err)
	}
	certPEM, err := os.ReadFile(f.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := os.ReadFile(f.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if len(pair.Certificate) != 2 {
		t.Errorf("the pair holds %d certificates; want the member's and the chain's one", len(pair.Certificate))
	}
	for _, p := range []string{f.CertFile, f.TrustedCAFile} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s has mode %v; want 0600", p, fi.Mode().Perm())
		}
	}
}
