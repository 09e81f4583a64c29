package injector

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"strings"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

// Keeping another issuer's CA next to certapi's (annotation certapi.dev/keep-foreign-ca): the step of
// a migration in which kube-apiserver must trust both the old tool's CA, which the webhook still
// serves from, and certapi's, which it is moving to.
//
// The rules, all decided here without I/O:
//   - only CA certificates are kept (parseable CERTIFICATE blocks with basicConstraints CA:TRUE); a
//     field holding anything else is not written at all (writing would drop what the webhook may
//     serve from), and the object is reported in conflict;
//   - certapi's own CAs (common name signer.CACommonNamePrefix) are never kept: they come from the
//     bundle alone, so a Retiring or distrusted certapi CA leaves the field with the bundle;
//   - nor is any certificate of certapi's current bundle, whatever its name: an organisation's root
//     that the bundle carries for certapi's intermediate CA (--ca-bundle-anchor=Root) is certapi's
//     trust, not a foreign CA, and a field that holds the bundle followed by foreign CAs holds the
//     bundle (fieldContent.prefixes);
//   - at most maxForeignCAs certificates and maxForeignBytes of PEM are kept per field;
//   - the foreign CAs are what the field holds when certapi reads it; removing the annotation makes
//     certapi write its bundle alone.

const (
	// ReasonKeepingForeignCA: the Normal Event saying which foreign CAs certapi keeps in the caBundle.
	ReasonKeepingForeignCA = "KeepingForeignCA"
	// ReasonForeignCANotKept: the object asks to keep foreign CAs but its caBundle holds something
	// that cannot be kept; nothing is written.
	ReasonForeignCANotKept = "ForeignCANotKept"
	// ReasonInvalidAnnotation: an annotation of certapi's has a value it does not accept.
	ReasonInvalidAnnotation = "InvalidAnnotation"

	// maxForeignCAs bounds the foreign CAs kept in one caBundle field.
	maxForeignCAs = 4
	// maxForeignBytes bounds their PEM.
	maxForeignBytes = 16 << 10
	// maxFieldParse bounds the field certapi parses at all; a larger one is not a CA bundle.
	maxFieldParse = 256 << 10
)

// keepForeignCA reads annotation certapi.dev/keep-foreign-ca: keep is true for "true"; problem is a
// message for any value other than "true" and "false" (absent is false).
func keepForeignCA(annotations map[string]string) (keep bool, problem string) {
	v, ok := annotations[certapiv1alpha1.AnnotationKeepForeignCA]
	switch {
	case !ok || v == "false":
		return false, ""
	case v == "true":
		return true, ""
	}
	if len(v) > 40 {
		v = v[:37] + "..."
	}
	return false, fmt.Sprintf("annotation %s is %q; accepted values are \"true\" (keep the foreign CAs in the caBundle next to certapi's) and \"false\", "+
		"or remove it. Nothing is written until it is fixed.", certapiv1alpha1.AnnotationKeepForeignCA, v)
}

// fieldContent is what a caBundle field holds, split into certapi's CAs and the others.
type fieldContent struct {
	// own is the digest of certapi's CAs in the field (PEM, in field order, as signer.EncodeBundle
	// writes them): equal to the bundle's digest when the field holds the bundle, possibly with
	// foreign CAs around it.
	own digest
	// foreign are the other CA certificates, in field order, without duplicates (filled only when
	// the object keeps foreign CAs).
	foreign []*x509.Certificate
	// problem says why the field's other content cannot be kept ("" when it can).
	problem string
	// prefixes are, when the object keeps foreign CAs, the digests of the field's first k certificates
	// (as signer.EncodeBundle writes them) for each k: the field holds a bundle whose digest is one of
	// them, followed by foreign CAs. So a bundle with certificates of any name (an organisation's root)
	// is recognised in the field.
	prefixes []digest
}

// maxPrefixes bounds fieldContent.prefixes.
const maxPrefixes = maxForeignCAs + 8

// splitField parses a caBundle field. keep says the object keeps foreign CAs: only then are they
// collected and checked.
func splitField(raw []byte, keep bool) fieldContent {
	var out fieldContent
	if len(raw) > maxFieldParse {
		out.own = digestOf(nil)
		out.problem = fmt.Sprintf("it holds %d bytes, more than the %d a CA bundle may have here", len(raw), maxFieldParse)
		return out
	}
	var own, all []*x509.Certificate
	seen := map[string]bool{}
	foreignBytes := 0
	rest := raw
	for n := 1; ; n++ {
		rest = bytes.TrimSpace(rest)
		if len(rest) == 0 {
			break
		}
		block, after := pem.Decode(rest)
		if block == nil {
			if out.problem == "" {
				out.problem = fmt.Sprintf("after %d PEM block(s) it holds data that is not PEM", n-1)
			}
			break
		}
		rest = after
		if block.Type != "CERTIFICATE" {
			if out.problem == "" {
				out.problem = fmt.Sprintf("PEM block %d is a %q, not a CERTIFICATE", n, block.Type)
			}
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			if out.problem == "" {
				out.problem = fmt.Sprintf("certificate %d does not parse: %v", n, err)
			}
			continue
		}
		if keep && len(all) < maxPrefixes {
			all = append(all, c)
			out.prefixes = append(out.prefixes, digestOf(signer.EncodeBundle(all...)))
		}
		if strings.HasPrefix(c.Subject.CommonName, signer.CACommonNamePrefix) {
			own = append(own, c)
			continue
		}
		if !keep || seen[string(c.Raw)] {
			continue
		}
		seen[string(c.Raw)] = true
		switch {
		case !c.BasicConstraintsValid || !c.IsCA:
			if out.problem == "" {
				out.problem = fmt.Sprintf("certificate %d (%s) is not a CA (no basicConstraints CA:TRUE); only CAs are kept", n, describeCA(c))
			}
			continue
		case len(out.foreign) == maxForeignCAs:
			if out.problem == "" {
				out.problem = fmt.Sprintf("it holds more than %d foreign CAs; at most %d are kept", maxForeignCAs, maxForeignCAs)
			}
			continue
		case foreignBytes+len(block.Bytes) > maxForeignBytes:
			if out.problem == "" {
				out.problem = fmt.Sprintf("its foreign CAs are larger than %d bytes", maxForeignBytes)
			}
			continue
		}
		foreignBytes += len(block.Bytes)
		out.foreign = append(out.foreign, c)
	}
	out.own = digestOf(signer.EncodeBundle(own...))
	if !keep {
		out.problem = ""
	}
	return out
}

// withForeign is bundle followed by the foreign CAs: what a field that keeps them holds.
func withForeign(bundle []byte, foreign []*x509.Certificate) []byte {
	foreign = notIn(bundle, foreign)
	if len(foreign) == 0 {
		return bundle
	}
	out := append([]byte(nil), bundle...)
	return append(out, signer.EncodeBundle(foreign...)...)
}

// notIn returns the certificates of certs that bundle does not hold: the foreign CAs of a field, less
// what certapi's bundle carries (an organisation's root under --ca-bundle-anchor=Root).
func notIn(bundle []byte, certs []*x509.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range certs {
		if !bytes.Contains(bundle, signer.EncodeBundle(c)) {
			out = append(out, c)
		}
	}
	return out
}

// describeCA names a certificate in messages: its subject and SHA-256 fingerprint (public facts).
func describeCA(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return fmt.Sprintf("subject %q, SHA-256 %s", c.Subject.String(), hex.EncodeToString(sum[:8]))
}

// keptMessage is the Normal Event's message for the foreign CAs kept in k, described by kept.
func keptMessage(kind Kind, name string, kept []string) string {
	msg := fmt.Sprintf("certapi keeps %d foreign CA(s) in the caBundle of %s %s next to its own, because of annotation %s: %s. "+
		"Remove the annotation once the webhook serves a certificate from certapi's CA; certapi then writes its bundle alone.",
		len(kept), kind, name, certapiv1alpha1.AnnotationKeepForeignCA, strings.Join(kept, "; "))
	if len(msg) > maxNote {
		msg = msg[:maxNote-3] + "..."
	}
	return msg
}

// notKeptMessage is the conflict message for an object whose foreign caBundle content cannot be kept.
func notKeptMessage(kind Kind, name string, problems []string) string {
	msg := fmt.Sprintf("certapi does not write the caBundle of %s %s: annotation %s asks to keep the foreign CAs it holds, but %s. "+
		"Nothing is written, so kube-apiserver trusts what it trusted before. Put only the old CA certificate(s) in the caBundle, "+
		"or remove annotation %s to have certapi's bundle replace the field.",
		kind, name, certapiv1alpha1.AnnotationKeepForeignCA, strings.Join(problems, "; "), certapiv1alpha1.AnnotationKeepForeignCA)
	if len(msg) > maxNote {
		msg = msg[:maxNote-3] + "..."
	}
	return msg
}
