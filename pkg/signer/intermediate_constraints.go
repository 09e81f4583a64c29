package signer

import (
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"fmt"
	"net"
	"slices"
	"strings"
)

// constraintGaps compares the name constraints of cert with those of a CA of
// certapi's for clusterDomain (setCAConstraints).
//
// wider lists each constraint certapi's CA has that cert lacks, or where
// cert allows more: a missing permitted DNS subtree ("svc",
// "svc.<clusterDomain>") or one outside them, a missing excluded IP range
// (0.0.0.0/0, ::/0), a missing permitted or excluded URI or e-mail subtree
// ForbiddingConstraint, a permitted one besides it, and a name constraints
// extension that is not critical. A certificate in wider's way vouches for
// more names than certapi ever issues.
//
// narrower lists what would make leaves certapi must issue fail: a
// permitted DNS list that does not cover all of "svc" or
// "svc.<clusterDomain>" (every leaf has a name under each), or an excluded
// DNS subtree that covers one of them. It applies to every certificate on
// the chain, not only certapi's.
func constraintGaps(cert *x509.Certificate, clusterDomain string) (wider, narrower []string) {
	bases := PermittedDNSDomains(clusterDomain)
	if hasExtension(cert, oidExtNameConstraints) && !cert.PermittedDNSDomainsCritical {
		wider = append(wider, "the name constraints extension is not critical (RFC 5280 requires it to be, so that a verifier that does not know it refuses the certificate)")
	}
	if len(cert.PermittedDNSDomains) == 0 {
		for _, b := range bases {
			wider = append(wider, fmt.Sprintf("permitted DNS subtree %q missing", b))
		}
	} else {
		for _, e := range cert.PermittedDNSDomains {
			if !dnsWithin(e, bases) {
				wider = append(wider, fmt.Sprintf("permitted DNS subtree %q is outside certapi's (%s)", truncate(e), quoteList(bases)))
			}
		}
		for _, b := range bases {
			if !slices.ContainsFunc(cert.PermittedDNSDomains, func(e string) bool { return dnsCovers(e, b) }) {
				narrower = append(narrower, fmt.Sprintf("no permitted DNS subtree covers %q (permitted: %s), and every certificate certapi issues has a name under it", b, quoteList(cert.PermittedDNSDomains)))
			}
		}
	}
	for _, e := range cert.ExcludedDNSDomains {
		for _, b := range bases {
			if dnsCovers(e, b) {
				narrower = append(narrower, fmt.Sprintf("excluded DNS subtree %q excludes every name under %q, and every certificate certapi issues has a name under it", truncate(e), b))
			}
		}
	}
	for _, want := range excludedIPRanges() {
		if !slices.ContainsFunc(cert.ExcludedIPRanges, func(n *net.IPNet) bool { return bytes.Equal(n.IP, want.IP) && bytes.Equal(n.Mask, want.Mask) }) {
			wider = append(wider, fmt.Sprintf("excluded IP range %s missing", want))
		}
	}
	wider = append(wider, forbiddingGaps("URI", cert.PermittedURIDomains, cert.ExcludedURIDomains)...)
	wider = append(wider, forbiddingGaps("e-mail", cert.PermittedEmailAddresses, cert.ExcludedEmailAddresses)...)
	return wider, narrower
}

// forbiddingGaps lists what of the pair of ForbiddingConstraint subtrees
// (one permitted, one excluded) that forbids every name of a type is missing
// from permitted and excluded, and any permitted subtree besides it.
func forbiddingGaps(kind string, permitted, excluded []string) []string {
	var out []string
	if !slices.Contains(permitted, ForbiddingConstraint) {
		out = append(out, fmt.Sprintf("permitted %s subtree %q missing", kind, ForbiddingConstraint))
	}
	for _, p := range permitted {
		if p != ForbiddingConstraint {
			out = append(out, fmt.Sprintf("permitted %s subtree %q is more than certapi's (%q, which no name matches)", kind, truncate(p), ForbiddingConstraint))
		}
	}
	if !slices.Contains(excluded, ForbiddingConstraint) {
		out = append(out, fmt.Sprintf("excluded %s subtree %q missing", kind, ForbiddingConstraint))
	}
	return out
}

// dnsWithin reports whether every name the dNSName subtree e contains lies
// under one of bases: e is a base or a name below one. The leading-dot form
// (".svc") is read like the plain one; the only name they differ on, the
// base itself, is never issued.
func dnsWithin(e string, bases []string) bool {
	n := strings.TrimPrefix(strings.ToLower(e), ".")
	if n == "" {
		return false
	}
	for _, b := range bases {
		if n == b || strings.HasSuffix(n, "."+b) {
			return true
		}
	}
	return false
}

// dnsCovers reports whether the dNSName subtree e contains every name under
// base: e is base or a name above it, or empty (every name, as Go's
// verifier reads it).
func dnsCovers(e, base string) bool {
	n := strings.TrimPrefix(strings.ToLower(e), ".")
	return n == "" || n == base || strings.HasSuffix(base, "."+n)
}

// quoteList formats names for a message: "a", "b".
func quoteList(names []string) string {
	q := make([]string, 0, len(names))
	for i, n := range names {
		if i == 8 {
			q = append(q, fmt.Sprintf("and %d more", len(names)-i))
			break
		}
		q = append(q, fmt.Sprintf("%q", truncate(n)))
	}
	return strings.Join(q, ", ")
}

// hasExtension reports whether cert carries the extension oid.
func hasExtension(cert *x509.Certificate, oid asn1.ObjectIdentifier) bool {
	for _, e := range cert.Extensions {
		if e.Id.Equal(oid) {
			return true
		}
	}
	return false
}
