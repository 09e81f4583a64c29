package signer

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"
)

// MaxCommonNameLength is the upper bound RFC 5280 puts on a subject common
// name. A leaf whose "<svc>.<ns>.svc" is longer gets an empty subject (and
// then, as RFC 5280 requires, a critical SAN extension) instead.
const MaxCommonNameLength = 64

// LeafRequest says what a serving certificate is for. Identity comes only
// from here, never from a CSR's subject or extensions: the API layer fills it
// from the ServingCertRequest, whose namespace is the trust boundary.
type LeafRequest struct {
	// ServiceName, Namespace and ClusterDomain give the two names every
	// certificate carries: "<svc>.<ns>.svc" and "<svc>.<ns>.svc.<domain>".
	ServiceName, Namespace, ClusterDomain string
	// DNSNames are extra SANs, already validated and normalised by the API
	// layer. Sign still refuses any that is not lower case, not a DNS name or
	// not inside "<ns>.svc" or "<ns>.svc.<domain>".
	DNSNames []string
	// PublicKey is the key to certify; it must pass CheckPublicKey.
	PublicKey crypto.PublicKey
	// Duration is the requested lifetime counted from Now. The leaf's
	// notAfter is capped at the CA's notAfter.
	Duration time.Duration
	// Backdate is how far before Now notBefore lies; zero means Backdate.
	Backdate time.Duration
	// Now is the issuance time; zero means time.Now().
	Now time.Time
}

// Leaf is a signed serving certificate and the facts the API reports about
// it.
type Leaf struct {
	Certificate *x509.Certificate
	// CertificatePEM is what a server presents: the leaf, then for a CA
	// that an organisation's CA signed the CA's ServedChain (its own
	// certificate and the intermediates above it). For a self-signed CA it
	// is the leaf alone, as it always was. Consumers that need the leaf read
	// the first block.
	CertificatePEM []byte
	// SerialNumber is the serial as lower-case hex without colons or
	// leading zeros (see FormatSerialNumber).
	SerialNumber        string
	NotBefore, NotAfter time.Time
}

// Sign issues a TLS serving certificate for req.
//
// The certificate's SANs are exactly SANs(req.ServiceName, req.Namespace,
// req.ClusterDomain, req.DNSNames); its subject is CN "<svc>.<ns>.svc" when
// that fits in MaxCommonNameLength, otherwise empty with a critical SAN
// extension. It has extended key usage serverAuth only, key usage
// digitalSignature (plus keyEncipherment for RSA keys, which RSA key
// exchange needs), basic constraints cA false, a subject key identifier
// computed from the key and the CA's as authority key identifier, a random
// 128-bit positive serial, notBefore = Now - Backdate (or req.Backdate; not before the CA's
// notBefore) and notAfter = min(Now + Duration, CA notAfter): a leaf never
// outlives its CA. For a CA with a Chain, the leaf's notAfter is capped at
// ChainNotAfter as well, its names must be permitted by the name
// constraints of every certificate of the chain, and CertificatePEM carries
// the chain a server must present (see Leaf).
func (ca *CA) Sign(req LeafRequest) (*Leaf, error) {
	leaf, der, err := ca.sign(req)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the certificate just signed for %s: %w", req.ServiceName, err)
	}
	leaf.Certificate = cert
	return leaf, nil
}

// SignPEM is Sign without parsing the certificate it made (crypto/x509 has verified its signature
// already), for callers that need only its PEM and the facts Leaf reports: Leaf.Certificate is nil.
func (ca *CA) SignPEM(req LeafRequest) (*Leaf, error) {
	leaf, _, err := ca.sign(req)
	return leaf, err
}

// sign makes the certificate of Sign and returns it as DER and as a Leaf without Certificate, whose
// other fields are the template's: crypto/x509 encodes its serial and times (whole seconds, UTC) as
// they are.
func (ca *CA) sign(req LeafRequest) (*Leaf, []byte, error) {
	if ca == nil || ca.Certificate == nil {
		return nil, nil, errors.New("signing: no CA certificate")
	}
	if ca.Key == nil {
		return nil, nil, errors.New("signing: the CA has no private key: it no longer signs (a Retiring CA keeps its certificate only)")
	}
	sans, err := checkLeafNames(req)
	if err != nil {
		return nil, nil, fmt.Errorf("signing: %w", err)
	}
	if err := checkPermittedByCA(ca.Certificate, sans); err != nil {
		return nil, nil, fmt.Errorf("signing: %w", err)
	}
	for _, c := range ca.Chain {
		if err := checkPermittedByCA(c, sans); err != nil {
			return nil, nil, fmt.Errorf("signing: %s in the CA's chain: %w", describeCert(c), err)
		}
	}
	if err := CheckPublicKey(req.PublicKey); err != nil {
		return nil, nil, fmt.Errorf("signing: %w", err)
	}
	if req.Duration <= 0 {
		return nil, nil, fmt.Errorf("signing: duration %s; expected a positive duration", req.Duration)
	}

	now := req.Now
	if now.IsZero() {
		now = time.Now()
	}
	// X.509 times have whole seconds; truncating here keeps the template and
	// the parsed result equal.
	now = now.UTC().Truncate(time.Second)
	caCert := ca.Certificate
	if now.Before(caCert.NotBefore) {
		return nil, nil, fmt.Errorf("signing: CA is not valid until %s", caCert.NotBefore.Format(time.RFC3339))
	}
	if !now.Before(caCert.NotAfter) {
		return nil, nil, fmt.Errorf("signing: CA expired at %s", caCert.NotAfter.Format(time.RFC3339))
	}
	caNotAfter := ca.ChainNotAfter()
	if !now.Before(caNotAfter) {
		return nil, nil, fmt.Errorf("signing: a certificate of the CA's chain expired at %s", caNotAfter.UTC().Format(time.RFC3339))
	}
	backdate := req.Backdate
	if backdate <= 0 {
		backdate = Backdate
	}
	notBefore := now.Add(-backdate)
	if notBefore.Before(caCert.NotBefore) {
		notBefore = caCert.NotBefore
	}
	notAfter := now.Add(req.Duration)
	if notAfter.After(caNotAfter) {
		notAfter = caNotAfter
	}

	serial, err := RandomSerial()
	if err != nil {
		return nil, nil, fmt.Errorf("signing: %w", err)
	}
	ski, err := subjectKeyID(req.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing: %w", err)
	}
	var subject pkix.Name
	if cn := sans[0]; len(cn) <= MaxCommonNameLength {
		subject.CommonName = cn
	}
	// With an empty subject crypto/x509 marks the SAN extension critical,
	// as RFC 5280 section 4.2.1.6 requires.
	keyUsage := x509.KeyUsageDigitalSignature
	if _, ok := req.PublicKey.(*rsa.PublicKey); ok {
		keyUsage |= x509.KeyUsageKeyEncipherment
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject,
		DNSNames:              sans,
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              keyUsage,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  false,
		SubjectKeyId:          ski,
		AuthorityKeyId:        caCert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, req.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing certificate for %s: %w", sans[0], err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if served := ca.ServedChain(); len(served) > 0 {
		certPEM = append(certPEM, EncodeBundle(served...)...)
	}
	return &Leaf{
		CertificatePEM: certPEM,
		SerialNumber:   FormatSerialNumber(serial),
		NotBefore:      notBefore,
		NotAfter:       notAfter,
	}, der, nil
}

// SANs returns the DNS names of a serving certificate for a Service:
// "<svc>.<ns>.svc", "<svc>.<ns>.svc.<clusterDomain>" (omitted when
// clusterDomain is empty), then extra, without duplicates or empty strings,
// in that order. Bare "<svc>" and "<svc>.<ns>" are never included: they
// collide across namespaces and with real domains.
func SANs(serviceName, namespace, clusterDomain string, extra []string) []string {
	base := serviceName + "." + namespace + ".svc"
	out := make([]string, 0, 2+len(extra))
	seen := make(map[string]struct{}, 2+len(extra))
	add := func(name string) {
		if name == "" {
			return
		}
		if _, dup := seen[name]; dup {
			return
		}
		seen[name] = struct{}{}
		out = append(out, name)
	}
	add(base)
	if clusterDomain != "" {
		add(base + "." + clusterDomain)
	}
	for _, name := range extra {
		add(name)
	}
	return out
}

// FormatSerialNumber formats a certificate serial number as lower-case hex
// without colons or leading zeros, the form of Leaf.SerialNumber and of the
// API's serialNumber fields.
func FormatSerialNumber(n *big.Int) string {
	if n == nil {
		return ""
	}
	return n.Text(16)
}

// checkLeafNames validates the identity fields of req and returns its SANs.
// The API layer has validated them already; this is the signer's own guard
// that it can never issue a name outside the request's namespace.
func checkLeafNames(req LeafRequest) ([]string, error) {
	if err := validateDNSLabel(req.ServiceName, true); err != nil {
		return nil, fmt.Errorf("service name %q: %w", truncate(req.ServiceName), err)
	}
	if err := validateDNSLabel(req.Namespace, false); err != nil {
		return nil, fmt.Errorf("namespace %q: %w", truncate(req.Namespace), err)
	}
	if err := validateDNSName(req.ClusterDomain, false); err != nil {
		return nil, fmt.Errorf("cluster domain %q: %w", truncate(req.ClusterDomain), err)
	}
	sans := SANs(req.ServiceName, req.Namespace, req.ClusterDomain, req.DNSNames)
	nsSuffix := "." + req.Namespace + ".svc"
	nsDomainSuffix := nsSuffix + "." + req.ClusterDomain
	apiServer := map[string]bool{"kubernetes.default.svc": true, "kubernetes.default.svc." + req.ClusterDomain: true}
	for _, name := range sans {
		if err := validateDNSName(name, true); err != nil {
			return nil, fmt.Errorf("DNS name %q: %w", truncate(name), err)
		}
		var head string
		switch {
		case strings.HasSuffix(name, nsSuffix):
			head = strings.TrimSuffix(name, nsSuffix)
		case strings.HasSuffix(name, nsDomainSuffix):
			head = strings.TrimSuffix(name, nsDomainSuffix)
		default:
			return nil, fmt.Errorf("DNS name %q is outside namespace %q; accepted: <name>%s or <name>%s", truncate(name), req.Namespace, nsSuffix, nsDomainSuffix)
		}
		if head == "*" {
			return nil, fmt.Errorf("DNS name %q is a namespace-wide wildcard; accepted: *.<service>%s", truncate(name), nsSuffix)
		}
		if apiServer[name] {
			return nil, fmt.Errorf("DNS name %q belongs to the Kubernetes API server and is never issued", name)
		}
	}
	return sans, nil
}

// checkPermittedByCA refuses names that the CA's own DNS name constraints do
// not permit (for example a cluster domain other than the CA's): such a
// certificate would fail verification, so it is better not to issue it.
func checkPermittedByCA(caCert *x509.Certificate, sans []string) error {
	for _, name := range sans {
		if len(caCert.PermittedDNSDomains) > 0 {
			permitted := false
			for _, c := range caCert.PermittedDNSDomains {
				if matchDNSConstraint(name, c) {
					permitted = true
					break
				}
			}
			if !permitted {
				return fmt.Errorf("DNS name %q is not permitted by the CA's name constraints; accepted: names under %s",
					truncate(name), strings.Join(caCert.PermittedDNSDomains, ", "))
			}
		}
		for _, c := range caCert.ExcludedDNSDomains {
			if matchDNSConstraint(name, c) {
				return fmt.Errorf("DNS name %q is excluded by the CA's name constraints", truncate(name))
			}
		}
	}
	return nil
}

// matchDNSConstraint reports whether name lies within a dNSName constraint:
// the constraint itself or any name made by adding labels on the left. A
// constraint with a leading dot matches only names with added labels, as
// crypto/x509 treats it. Names here are lower case.
func matchDNSConstraint(name, constraint string) bool {
	if constraint == "" {
		return true
	}
	constraint = strings.ToLower(constraint)
	if strings.HasPrefix(constraint, ".") {
		return strings.HasSuffix(name, constraint) && len(name) > len(constraint)
	}
	return name == constraint || strings.HasSuffix(name, "."+constraint)
}

// validateDNSLabel checks an RFC 1123 label (lower case alphanumerics and
// '-', starting and ending with an alphanumeric, at most 63 characters); with
// dns1035 it must also start with a letter, as Service names do.
func validateDNSLabel(s string, dns1035 bool) error {
	const accepted = "accepted: lower-case letters, digits and '-', at most 63 characters, starting and ending with a letter or digit"
	if s == "" {
		return errors.New("empty; " + accepted)
	}
	if len(s) > 63 {
		return fmt.Errorf("%d characters; %s", len(s), accepted)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := ('a' <= c && c <= 'z') || ('0' <= c && c <= '9')
		switch {
		case alnum:
		case c == '-' && i != 0 && i != len(s)-1:
		default:
			return errors.New("not a DNS label; " + accepted)
		}
	}
	if dns1035 && !('a' <= s[0] && s[0] <= 'z') {
		return errors.New("must start with a letter (DNS-1035 label)")
	}
	return nil
}

// validateDNSName checks a lower-case DNS name of RFC 1123 labels, at most
// 253 characters, without a trailing dot. With allowWildcard the first label
// may be "*".
func validateDNSName(s string, allowWildcard bool) error {
	if s == "" {
		return errors.New("empty; expected a DNS name")
	}
	if len(s) > 253 {
		return fmt.Errorf("%d characters; accepted: at most 253", len(s))
	}
	for i, label := range strings.Split(s, ".") {
		if i == 0 && allowWildcard && label == "*" {
			continue
		}
		if err := validateDNSLabel(label, false); err != nil {
			return fmt.Errorf("label %q: %w", truncate(label), err)
		}
	}
	return nil
}

// RandomSerial returns a random positive serial number of at most 128 bits, for every certificate
// certapi makes (leaves, CAs, and the embedded etcd cluster's peer certificates).
// It is positive by construction (big.Int from unsigned bytes, never zero),
// so it encodes in at most 17 DER octets, well within RFC 5280's 20, and has
// far more than the 64 bits of entropy the CA/Browser Forum asks for.
func RandomSerial() (*big.Int, error) {
	b := make([]byte, 16)
	for {
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("generating serial number: %w", err)
		}
		if n := new(big.Int).SetBytes(b); n.Sign() > 0 {
			return n, nil
		}
	}
}

// subjectKeyID computes a key identifier by RFC 7093 section 2 method 1: the
// leftmost 160 bits of the SHA-256 of the subjectPublicKey BIT STRING. That is
// what crypto/x509 generates for CA certificates by default (it generates
// none for leaves), so CA and leaf identifiers are computed the same way.
func subjectKeyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("computing subject key identifier: %w", err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	rest, err := asn1.Unmarshal(der, &spki)
	if err != nil {
		return nil, fmt.Errorf("computing subject key identifier: %w", err)
	}
	if len(rest) != 0 {
		return nil, errors.New("computing subject key identifier: trailing data after the public key")
	}
	sum := sha256.Sum256(spki.PublicKey.Bytes)
	return sum[:20], nil
}
