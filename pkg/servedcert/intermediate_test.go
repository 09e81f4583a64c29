package servedcert

import (
	"crypto/elliptic"
	"crypto/x509"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// TestClassifyIntermediate: a leaf of certapi's CA under an organisation's root, served with its chain,
// verifies against a bundle of the root and one of the intermediate, and is attributed to the
// intermediate (the CA rotation and distrust know), never to the root.
func TestClassifyIntermediate(t *testing.T) {
	now := time.Now()
	root := signertest.NewRoot(t, "Example Root", now)
	ca := root.Intermediate(t, now)
	leafKey := signertest.ECKey(t, elliptic.P256())
	leaf, err := ca.Sign(signer.LeafRequest{ServiceName: "webhook", Namespace: "tenant", ClusterDomain: signertest.ClusterDomain, PublicKey: leafKey.Public(), Duration: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	served, err := signer.ParseBundle(leaf.CertificatePEM)
	if err != nil {
		t.Fatal(err)
	}
	want := signer.FormatSerialNumber(ca.Certificate.SerialNumber)
	a := signer.Authorities{Active: ca}
	for _, anchor := range []signer.BundleAnchor{signer.AnchorRoot, signer.AnchorIntermediate} {
		res := Classify(served, a.CertificatesFor(anchor), "webhook.tenant.svc", now, 0)
		if res.State != Verified || res.IssuerSerial != want {
			t.Errorf("anchor %s: %s, issuer %s (%s); want Verified by %s", anchor, res.State, res.IssuerSerial, res.Message, want)
		}
	}
	// Served without the intermediate, a bundle of the root does not verify it.
	if res := Classify([]*x509.Certificate{served[0]}, a.CertificatesFor(signer.AnchorRoot), "webhook.tenant.svc", now, 0); res.State != Untrusted {
		t.Errorf("leaf alone against the root: %s; want Untrusted", res.State)
	}
}
