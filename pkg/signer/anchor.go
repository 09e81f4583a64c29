package signer

import (
	"crypto/x509"
	"fmt"
	"time"
)

// BundleAnchor says which certificate of a CA that an organisation's CA
// signed (an intermediate, see CheckIntermediate) goes into the bundles
// certapi injects: what clients pin as their trust anchor. It is the
// operator's choice; self-signed CAs are in every bundle as themselves,
// whatever it says.
//
// The trade-offs:
//
//   - AnchorRoot (the default) puts the organisation's root in the bundle.
//     A rotation to a new intermediate under the same root changes no bundle
//     at all, and every client already trusts the next CA. But a client then
//     trusts every certificate the organisation's root and its other
//     intermediates sign for the names it asks for: trust is limited only
//     by the name constraints of the certificates on each path (those of
//     certapi's intermediate bind only certapi's leaves). And a retired or
//     distrusted certapi intermediate cannot leave the bundle, because the
//     root it chains to stays: its leaves stay trusted until they expire
//     (nothing in a cluster checks revocation), so distrust cannot cut off a
//     leaked certapi key under this anchor.
//   - AnchorIntermediate pins certapi's own CA certificate: a client trusts
//     only what certapi's key signed, as with a self-signed CA. A rotation
//     publishes the Next intermediate and drops the old one once it retires,
//     and distrust removes a compromised one at once, exactly as for
//     self-signed CAs. Clients must accept a trust anchor that is not
//     self-signed: Go (so kube-apiserver), Java, Python 3.13 and curl since
//     7.68 do; OpenSSL-based clients otherwise need X509_V_FLAG_PARTIAL_CHAIN
//     (`openssl verify -partial_chain`).
type BundleAnchor string

// The bundle anchors.
const (
	AnchorRoot         BundleAnchor = "Root"
	AnchorIntermediate BundleAnchor = "Intermediate"
)

// DefaultBundleAnchor is the anchor of an empty BundleAnchor.
const DefaultBundleAnchor = AnchorRoot

// ParseBundleAnchor checks a BundleAnchor given as text (a flag, an API
// field): "Root", "Intermediate", or "" for DefaultBundleAnchor. Anything
// else is an error that names the accepted values.
func ParseBundleAnchor(s string) (BundleAnchor, error) {
	switch a := BundleAnchor(s); a {
	case "":
		return DefaultBundleAnchor, nil
	case AnchorRoot, AnchorIntermediate:
		return a, nil
	}
	return "", fmt.Errorf("bundle anchor %q is not known; accepted: %s, %s", truncate(s), AnchorRoot, AnchorIntermediate)
}

// Anchor returns the certificate a bundle carries for ca under anchor: ca's
// own certificate for a self-signed CA or for AnchorIntermediate, its Root
// for AnchorRoot. An unknown anchor is treated as DefaultBundleAnchor; check
// it with ParseBundleAnchor where it is read.
func (ca *CA) Anchor(anchor BundleAnchor) *x509.Certificate {
	if anchor == AnchorIntermediate {
		return ca.Certificate
	}
	return ca.Root()
}

// CertificatesFor returns the certificates of the bundle for anchor: each
// CA's Anchor, in the bundle's fixed order (Active, Next, then Retiring in
// the order they retired), without duplicates (CAs under one root give one
// entry, placed where the first of them is). With only self-signed CAs it is
// Certificates.
func (a Authorities) CertificatesFor(anchor BundleAnchor) []*x509.Certificate {
	var cas []*CA
	if a.Active != nil {
		cas = append(cas, a.Active)
	}
	if a.Next != nil {
		cas = append(cas, a.Next)
	}
	for _, r := range a.Retiring {
		cas = append(cas, r.CA)
	}
	certs := make([]*x509.Certificate, 0, len(cas))
	seen := make(map[string]bool, len(cas))
	for _, ca := range cas {
		c := ca.Anchor(anchor)
		if seen[string(c.Raw)] {
			continue
		}
		seen[string(c.Raw)] = true
		certs = append(certs, c)
	}
	return certs
}

// Published is the bundle certapi publishes: BundleFor(a.Anchor).
func (a Authorities) Published() []byte {
	return a.BundleFor(a.Anchor)
}

// BundleFor is the byte-stable PEM trust bundle of CertificatesFor(anchor).
// With only self-signed CAs it is byte for byte Bundle.
func (a Authorities) BundleFor(anchor BundleAnchor) []byte {
	return EncodeBundle(a.CertificatesFor(anchor)...)
}

// RootAnchoredDistrust says, for Authorities just after a distrust, what the distrust cannot do when
// the bundles carry the organisation's root (AnchorRoot) and a distrusted CA is an intermediate under
// it: its leaves stay trusted by every client that trusts that root from elsewhere, and once a CA under
// the same root is imported again, the root is back in certapi's bundles and they are trusted there
// too, until they expire (nothing in a cluster checks revocation). "" when no such CA is distrusted.
// The distrust still goes on (the leaked key signs nothing more); this is the warning that goes with it.
func RootAnchoredDistrust(a Authorities) string {
	if a.Anchor == AnchorIntermediate {
		return ""
	}
	for _, r := range a.Retiring {
		if !r.Distrusted || r.CA.SelfSigned() {
			continue
		}
		return fmt.Sprintf("WARNING: the distrusted CA %s is an intermediate under the root %s, and the bundles carry that root (--ca-bundle-anchor=Root): "+
			"certificates it signed stay trusted by every client that trusts that root otherwise, and in certapi's bundles again as soon as a CA under the same root is imported, "+
			"until they expire (at the latest %s); to cut them off, use --ca-bundle-anchor=Intermediate before importing the next CA, and have the organisation revoke the intermediate",
			describeCert(r.CA.Certificate), describeCert(r.CA.Root()), r.CA.ChainNotAfter().UTC().Format(time.RFC3339))
	}
	return ""
}
