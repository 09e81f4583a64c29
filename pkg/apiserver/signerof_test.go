package apiserver

import (
	"crypto/elliptic"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// TestSignerOfIntermediate: certapi's own serving certificate is recorded as signed by the CA that
// signed it, also when that CA is an intermediate and the bundle holds only the organisation's root
// (--ca-bundle-anchor=Root), and when the bundle holds the CA itself.
func TestSignerOfIntermediate(t *testing.T) {
	now := time.Now()
	root := signertest.NewRoot(t, "Example Root", now)
	ca := root.Intermediate(t, now)
	leafKey := signertest.ECKey(t, elliptic.P256())
	leaf, err := ca.Sign(signer.LeafRequest{ServiceName: "certapi", Namespace: "certapi-system", ClusterDomain: signertest.ClusterDomain, PublicKey: leafKey.Public(), Duration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	a := signer.Authorities{Active: ca}
	want := signer.FormatSerialNumber(ca.Certificate.SerialNumber)
	for _, anchor := range []signer.BundleAnchor{signer.AnchorRoot, signer.AnchorIntermediate} {
		got, err := signerOf(leaf.CertificatePEM, a.BundleFor(anchor))
		if err != nil || got != want {
			t.Errorf("anchor %s: signerOf = %q, %v; want %q", anchor, got, err, want)
		}
	}
	// The leaf alone, with a bundle of the root: nothing names the signer.
	if _, err := signerOf(signer.EncodeBundle(leaf.Certificate), a.BundleFor(signer.AnchorRoot)); err == nil {
		t.Error("signerOf found a signer for a leaf served without its chain and a bundle of the root only")
	}
}
