package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"slices"
	"time"
)

// DefaultCADuration is the CA lifetime when CAOptions.Duration is zero; it
// matches the CertificateAuthority spec.duration default.
const DefaultCADuration = 8760 * time.Hour

// Backdate is how far before "now" every certificate's notBefore is set, so
// that a client whose clock is a little behind the signer's still accepts a
// certificate issued a moment ago.
const Backdate = 5 * time.Minute

// CA is one certificate authority: its certificate and private key. Sign
// issues serving certificates with it. A CA value is not modified by any
// method and may be used from several goroutines at once.
type CA struct {
	Certificate *x509.Certificate
	// Key is nil for a CA that no longer signs (Retiring): its private key is
	// dropped the moment it stops signing, so that it is in no record and no
	// memory after that (see WithoutKey, LoadCACertificate).
	Key crypto.Signer
	// Chain is empty for a CA certapi made itself (self-signed, NewCA). For a
	// CA whose certificate an organisation's CA signed (CheckIntermediate), it
	// is the verified path above Certificate: the CA that signed Certificate
	// first, then the CA that signed that one, and so on, ending with the
	// trust anchor the path was verified to (the root). Leaves are served
	// with the intermediates of it (see ServedChain), and a bundle carries
	// the root or the intermediate as the operator chooses (BundleAnchor).
	Chain []*x509.Certificate
}

// WithoutKey returns a copy of ca with its certificate (and chain) only, for a
// CA that stops signing: it stays trusted in bundles, but nothing can sign
// with it.
func (ca *CA) WithoutKey() *CA {
	return &CA{Certificate: ca.Certificate, Chain: ca.Chain}
}

// CAOptions configures NewCA.
type CAOptions struct {
	// ClusterDomain is the cluster's DNS domain, e.g. "cluster.local". The
	// CA's name constraints permit only names under "svc" and
	// "svc.<ClusterDomain>". Required.
	ClusterDomain string
	// Duration is the CA lifetime, DefaultCADuration if zero.
	Duration time.Duration
	// Now is the issuance time; zero means time.Now().
	Now time.Time
	// CommonName is the CA subject's CN; default "certapi-ca@<unix seconds>",
	// which makes successive CAs easy to tell apart in a bundle.
	CommonName string
	// Key is the CA's key, made elsewhere (an ECDSA P-256 key held in an HSM
	// that signs through crypto.Signer); nil makes a new ECDSA P-256 key in
	// memory. The CA's certificate is self-signed with it, so a key that cannot
	// sign fails NewCA.
	Key crypto.Signer
}

// CACommonNamePrefix starts the common name of every CA certapi makes ("certapi-ca@<unix seconds>"):
// the injector tells certapi's CAs from another issuer's by it, and never keeps one of its own as a
// foreign CA.
const CACommonNamePrefix = "certapi-ca@"

// NewCA creates a self-signed ECDSA P-256 CA for signing in-cluster serving
// certificates.
//
// The certificate is a CA with critical basic constraints and path length 0
// (it may sign only leaves), key usage certSign, cRLSign and
// digitalSignature, a subject key identifier, a random 128-bit serial and a
// notBefore backdated by Backdate. Its critical name constraints permit only
// DNS names under "svc" and "svc.<ClusterDomain>" and exclude every IPv4 and
// IPv6 address, so a verifier that enforces name constraints (Go's, hence
// kube-apiserver's) rejects any certificate from this CA for another name or
// for an IP address, even one signed by mistake.
//
// The constraints are written without a leading dot ("svc", not ".svc"), the
// form RFC 5280 defines for dNSName: it permits "a.b.svc" but not
// "example.com" or "svc.evil.com". The leading-dot form would also exclude
// the bare names "svc" and "svc.<ClusterDomain>", which are never issued
// here anyway, but it is not understood by every verifier (some OpenJDK
// releases reject it).
//
// The name constraints also forbid every URI and every e-mail address (see
// ForbiddingConstraint), and the CA carries extended key usage serverAuth
// only: a verifier that checks that a chain's extended key usages nest (Go's
// x509.Verify, OpenSSL's purpose checks) refuses a certificate of this CA
// for client authentication, e-mail protection or code signing, so a key
// that leaks, or a leaf signed by mistake, vouches only for TLS servers.
// The CA/Browser Forum forbids an EKU extension in a publicly trusted root,
// which this private CA is not; RFC 5280 (section 4.2.1.12) allows it.
//
// CAs made before these constraints existed keep working: LoadCA and Sign
// do not require them, and nothing re-issues a CA for them; the next CA
// (first start, rotation, distrust) carries them.
func NewCA(opts CAOptions) (*CA, error) {
	if err := validateDNSName(opts.ClusterDomain, false); err != nil {
		return nil, fmt.Errorf("creating CA: cluster domain %q: %w", truncate(opts.ClusterDomain), err)
	}
	duration := opts.Duration
	if duration == 0 {
		duration = DefaultCADuration
	}
	if duration < 0 {
		return nil, fmt.Errorf("creating CA: duration %s is negative; expected a positive duration", duration)
	}
	now := opts.Now
	if now.IsZero() {
		now = time.Now()
	}
	now = now.UTC().Truncate(time.Second)
	cn := opts.CommonName
	if cn == "" {
		cn = fmt.Sprintf("%s%d", CACommonNamePrefix, now.Unix())
	}

	key := opts.Key
	if key == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("creating CA: generating key: %w", err)
		}
		key = k
	} else if pub, ok := key.Public().(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		return nil, fmt.Errorf("creating CA: the key given is a %T, want an ECDSA P-256 key", key.Public())
	}
	serial, err := RandomSerial()
	if err != nil {
		return nil, fmt.Errorf("creating CA: %w", err)
	}
	ski, err := subjectKeyID(key.Public())
	if err != nil {
		return nil, fmt.Errorf("creating CA: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-Backdate),
		NotAfter:              now.Add(duration),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		SubjectKeyId:          ski,
	}
	setCAConstraints(tmpl, opts.ClusterDomain)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating CA: signing certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("creating CA: parsing the new certificate: %w", err)
	}
	return &CA{Certificate: cert, Key: key}, nil
}

// setCAConstraints sets on tmpl what limits every CA of certapi's, whoever signs it (NewCA itself, or
// an organisation's root through IntermediateRequest): extended key usage serverAuth only, and the
// critical name constraints that permit DNS names under "svc" and "svc.<clusterDomain>" only and forbid
// every IP address, URI and e-mail address (see NewCA and ForbiddingConstraint).
func setCAConstraints(tmpl *x509.Certificate, clusterDomain string) {
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.PermittedDNSDomainsCritical = true
	tmpl.PermittedDNSDomains = PermittedDNSDomains(clusterDomain)
	tmpl.ExcludedIPRanges = excludedIPRanges()
	tmpl.PermittedURIDomains = []string{ForbiddingConstraint}
	tmpl.ExcludedURIDomains = []string{ForbiddingConstraint}
	tmpl.PermittedEmailAddresses = []string{ForbiddingConstraint}
	tmpl.ExcludedEmailAddresses = []string{ForbiddingConstraint}
}

// excludedIPRanges are the excluded iPAddress subtrees of a CA of certapi's: every IPv4 and every IPv6
// address.
func excludedIPRanges() []*net.IPNet {
	return []*net.IPNet{
		{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 8*net.IPv4len)},
		{IP: net.IPv6zero, Mask: net.CIDRMask(0, 8*net.IPv6len)},
	}
}

// ForbiddingConstraint is the base of the uniformResourceIdentifier and
// rfc822Name name constraints of every CA NewCA makes, each present once as a
// permitted and once as an excluded subtree. A name of either type must then
// lie within a permitted subtree and outside every excluded one, and no name
// does: whatever a verifier's matching rules for a base are, it applies the
// same rules to both lists (RFC 5280 section 4.2.1.10: a name in both is
// excluded). So no certificate of this CA with a URI or e-mail SAN passes a
// verifier that enforces name constraints (OpenSSL applies the rfc822Name
// ones to an emailAddress in the subject too).
//
// Why not the shorter idiom, one excluded subtree with an empty base? Go's
// x509.Verify (like NSS) reads an empty base as "every name of this type"
// and refuses such leaves, but OpenSSL reads it as matching almost nothing:
// in crypto/x509/v3_ncons.c (3.0 up to today's master) only nc_dns treats an
// empty base as matching everything, while nc_email and nc_uri compare the
// host for equality, so `openssl verify` accepts a leaf with a URI or e-mail
// SAN under such a CA. A permitted subtree alone would narrow but still allow
// the names under its base. Both Go and `openssl verify` refuse every URI and
// e-mail name under the pair; TestURIAndEmailConstraints checks Go's side.
//
// "invalid" is the top-level domain RFC 6761 reserves as never resolving, so
// even a verifier that enforced only the permitted subtree would accept no
// name anyone can use.
const ForbiddingConstraint = "invalid"

// ForbidsURIsAndEmails reports whether cert's name constraints are the ones
// NewCA writes to forbid every URI and every e-mail address: a permitted
// subtree of ForbiddingConstraint alone and an excluded one of it, for both
// name types. A CA made before certapi wrote these has no URI or e-mail
// constraints at all.
func ForbidsURIsAndEmails(cert *x509.Certificate) bool {
	only := []string{ForbiddingConstraint}
	return slices.Equal(cert.PermittedURIDomains, only) && slices.Contains(cert.ExcludedURIDomains, ForbiddingConstraint) &&
		slices.Equal(cert.PermittedEmailAddresses, only) && slices.Contains(cert.ExcludedEmailAddresses, ForbiddingConstraint)
}

// PermittedDNSDomains returns the DNS name constraints of a CA for
// clusterDomain: "svc" and "svc.<clusterDomain>".
func PermittedDNSDomains(clusterDomain string) []string {
	return []string{"svc", "svc." + clusterDomain}
}

// LoadCA parses a CA from its PEM certificate (exactly one CERTIFICATE
// block) and private key (see ParseKeyPEM). It checks the certificate as
// LoadCACertificate does, and that the private key belongs to it, so that a
// mismatched pair fails here rather than at the first signature.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	key, err := ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading CA key: %w", err)
	}
	return LoadCAWithKey(certPEM, key)
}

// LoadCAWithKey is LoadCA for a key that is not in PEM: one held in an HSM
// (an ExternalKey). It checks that the key's public half is the
// certificate's.
func LoadCAWithKey(certPEM []byte, key crypto.Signer) (*CA, error) {
	ca, err := LoadCACertificate(certPEM)
	if err != nil {
		return nil, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.Certificate.PublicKey) {
		return nil, errors.New("loading CA: the private key does not match the certificate's public key")
	}
	ca.Key = key
	return ca, nil
}

// LoadCACertificate parses a CA that no longer signs from its PEM
// certificate alone (exactly one CERTIFICATE block): the result has no Key.
// It checks that the certificate is a CA allowed to sign certificates, that
// it has a subject key identifier (leaves carry it as their authority key
// identifier), and that its key is one CheckPublicKey accepts.
func LoadCACertificate(certPEM []byte) (*CA, error) {
	certs, err := ParseBundle(certPEM)
	if err != nil {
		return nil, fmt.Errorf("loading CA certificate: %w", err)
	}
	if len(certs) != 1 {
		return nil, fmt.Errorf("loading CA certificate: found %d certificates; expected exactly one", len(certs))
	}
	cert := certs[0]
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, errors.New("loading CA certificate: not a CA (basic constraints cA is not true)")
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("loading CA certificate: key usage does not include certSign")
	}
	if len(cert.SubjectKeyId) == 0 {
		return nil, errors.New("loading CA certificate: no subject key identifier; expected one (leaves reference it)")
	}
	if err := CheckPublicKey(cert.PublicKey); err != nil {
		return nil, fmt.Errorf("loading CA certificate: %w", err)
	}
	return &CA{Certificate: cert}, nil
}

// CertificatePEM returns the CA certificate as one PEM CERTIFICATE block.
func (ca *CA) CertificatePEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate.Raw})
}

// KeyPEM returns the CA private key as PKCS#8 PEM (see EncodeKeyPEM). The
// result is secret: store it only where CA keys belong, never log it. A CA
// without a key (one that no longer signs) is an error.
func (ca *CA) KeyPEM() ([]byte, error) {
	if ca.Key == nil {
		return nil, errors.New("encoding CA key: the CA has no private key (it no longer signs)")
	}
	return EncodeKeyPEM(ca.Key)
}

// SubjectKeyID returns the CA's subject key identifier as lower-case hex,
// the form used for CertificateAuthority status.active.
func (ca *CA) SubjectKeyID() string {
	return FormatKeyID(ca.Certificate.SubjectKeyId)
}

// FormatKeyID formats a key identifier as lower-case hex without colons.
func FormatKeyID(id []byte) string {
	return fmt.Sprintf("%x", id)
}
