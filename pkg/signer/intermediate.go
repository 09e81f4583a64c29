package signer

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ImportOptions says what CheckIntermediate accepts.
type ImportOptions struct {
	// ClusterDomain is the cluster's DNS domain, as given to
	// IntermediateRequest. Required.
	ClusterDomain string
	// RootsPEM, when set, holds the organisation's roots (PEM CERTIFICATE
	// blocks): the chain must lead to one of them. A certificate of it need
	// not be self-signed: the operator may choose any CA as the anchor.
	// Empty: the chain must end with a self-signed root, which is then the
	// anchor (the operator vouches for it by importing it).
	RootsPEM []byte
	// MinRemaining is the least time the certificate and every certificate
	// of its chain must still be valid from Now; DefaultMinRemaining if zero.
	MinRemaining time.Duration
	// AcceptWiderConstraints accepts a certificate whose name constraints are
	// missing or wider than certapi's own; what is missing is then reported as
	// warnings (ReasonNameConstraints) instead of refused.
	AcceptWiderConstraints bool
	// Now is the time of the checks; zero means time.Now().
	Now time.Time
}

// DefaultMinRemaining is ImportOptions.MinRemaining when it is zero: a CA
// certificate must be valid for at least 30 days more to be imported, so
// that an import does not start a rotation at once.
const DefaultMinRemaining = 30 * 24 * time.Hour

// MaxImportBytes is the largest certificate, chain or roots PEM
// CheckIntermediate parses, each; real ones are a few KiB.
const MaxImportBytes = 256 << 10

// ImportReason classifies a Finding of CheckIntermediate, for conditions and
// metrics.
type ImportReason string

// The reasons of CheckIntermediate's findings.
const (
	// ReasonMalformed: an input is not PEM certificates, or too large.
	ReasonMalformed ImportReason = "Malformed"
	// ReasonKeyMismatch: the certificate is not for the CA key.
	ReasonKeyMismatch ImportReason = "KeyMismatch"
	// ReasonUnsupportedKey: the CA key, or the certificate's, is not one
	// CheckPublicKey accepts, or a chain certificate has an RSA key under
	// MinRSABits.
	ReasonUnsupportedKey ImportReason = "UnsupportedKey"
	// ReasonNotCA: no basic constraints with cA true.
	ReasonNotCA ImportReason = "NotCA"
	// ReasonKeyUsage: key usage without keyCertSign (refused), or none at all
	// (a warning).
	ReasonKeyUsage ImportReason = "KeyUsage"
	// ReasonExtKeyUsage: extended key usage without serverAuth on the
	// certificate or the chain (refused: leaves would not verify), or none or
	// more than serverAuth on the certificate (a warning).
	ReasonExtKeyUsage ImportReason = "ExtKeyUsage"
	// ReasonPathLength: the certificate lets certapi's key sign CAs (a
	// warning; see CheckIntermediate).
	ReasonPathLength ImportReason = "PathLength"
	// ReasonNoSubjectKeyID: no subject key identifier, which leaves reference.
	ReasonNoSubjectKeyID ImportReason = "NoSubjectKeyID"
	// ReasonNameConstraints: name constraints missing or wider than
	// certapi's (refused unless AcceptWiderConstraints).
	ReasonNameConstraints ImportReason = "NameConstraints"
	// ReasonNameConstraintsTooNarrow: name constraints of the certificate or
	// its chain that refuse names every certapi leaf carries.
	ReasonNameConstraintsTooNarrow ImportReason = "NameConstraintsTooNarrow"
	// ReasonNotYetValid: the certificate's notBefore is ahead of Now by more
	// than ClockTolerance.
	ReasonNotYetValid ImportReason = "NotYetValid"
	// ReasonExpiresTooSoon: the certificate or its chain is valid for less
	// than MinRemaining.
	ReasonExpiresTooSoon ImportReason = "ExpiresTooSoon"
	// ReasonChain: the chain does not lead from the certificate to a root.
	ReasonChain ImportReason = "ChainInvalid"
	// ReasonSubject: the common name does not start with CACommonNamePrefix
	// (a warning).
	ReasonSubject ImportReason = "Subject"
	// ReasonUnusedCertificate: a certificate of the chain is not on the path
	// to the root and is dropped (a warning).
	ReasonUnusedCertificate ImportReason = "UnusedCertificate"
)

// Finding is one problem (or, among warnings, one thing to know) about a
// certificate CheckIntermediate was given. Message says what is wrong and
// what is accepted; it names certificates by subject and serial number and
// never holds key material.
type Finding struct {
	Reason  ImportReason
	Message string
}

// String is "Reason: Message", the form findings take in errors and events.
func (f Finding) String() string {
	return string(f.Reason) + ": " + f.Message
}

// ErrIntermediateRefused is wrapped by every *IntermediateError.
var ErrIntermediateRefused = errors.New("intermediate CA certificate refused")

// IntermediateError is CheckIntermediate's refusal: every problem it found,
// so that one round trip to the upstream can fix them all.
type IntermediateError struct {
	Problems []Finding
	// Warnings are what would have been reported with the CA had it been
	// accepted (not part of Error's text).
	Warnings []Finding
}

// Error lists every problem, numbered, each as Finding.String.
func (e *IntermediateError) Error() string {
	var b strings.Builder
	b.WriteString(ErrIntermediateRefused.Error())
	if len(e.Problems) == 1 {
		b.WriteString(": ")
		b.WriteString(e.Problems[0].String())
		return b.String()
	}
	fmt.Fprintf(&b, ": %d problems:", len(e.Problems))
	for i, p := range e.Problems {
		fmt.Fprintf(&b, " (%d) %s;", i+1, p)
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Unwrap makes errors.Is(err, ErrIntermediateRefused) hold.
func (e *IntermediateError) Unwrap() error { return ErrIntermediateRefused }

// Has reports whether a problem of the given reason was found.
func (e *IntermediateError) Has(reason ImportReason) bool {
	for _, p := range e.Problems {
		if p.Reason == reason {
			return true
		}
	}
	return false
}

// CheckIntermediate imports certapi's CA certificate signed by an
// organisation's CA, in answer to IntermediateRequest: it returns a CA that
// signs with key and carries the verified chain above the certificate
// (CA.Chain), and warnings, or an *IntermediateError listing every problem.
//
// certPEM holds the signed certificate, optionally followed by its chain
// (as the Kubernetes CertificateSigningRequest API returns it); chainPEM
// holds more of the chain the upstream returned (intermediates, and
// optionally the root). Certificates equal to the signed one, and
// duplicates, are ignored; certificates not on the path to the root are
// dropped with a warning. key is used only through crypto.Signer: nothing
// is signed with it.
//
// Refused, with what is accepted:
//   - the certificate's public key is not key's (ReasonKeyMismatch); either
//     key is not one CheckPublicKey accepts, or a chain certificate has an
//     RSA key of fewer than MinRSABits (ReasonUnsupportedKey);
//   - it is not a CA (ReasonNotCA); its key usage lacks keyCertSign
//     (ReasonKeyUsage); it has no subject key identifier
//     (ReasonNoSubjectKeyID); it or a chain certificate has extended key
//     usages without serverAuth (ReasonExtKeyUsage);
//   - its name constraints are missing or wider than NewCA's: each missing
//     or wider entry is listed (ReasonNameConstraints; accepted as warnings
//     with AcceptWiderConstraints); or constraints of it or of the chain
//     refuse names under "svc" or "svc.<ClusterDomain>", which every leaf
//     carries (ReasonNameConstraintsTooNarrow, never accepted);
//   - it is not valid until more than ClockTolerance after Now
//     (ReasonNotYetValid); it, or a certificate of its chain, is valid for
//     less than MinRemaining (ReasonExpiresTooSoon, with how long is left);
//   - the chain does not lead from it to a root: which link fails, and why
//     (ReasonChain). Each link's signature must verify, each issuer must be a
//     CA valid now whose path length allows the CAs below it, and the path
//     must end at one of RootsPEM, or, without RootsPEM, at a self-signed
//     root given in the chain. Go's verifier then checks the whole path.
//
// Path length: a certificate without a path length limit, or with one above
// 0, lets the key sign CAs; certapi never does (it signs leaves only). It is
// accepted with a warning (ReasonPathLength), not refused: common upstreams
// do not honour the requested pathLen 0 (Vault's sign-intermediate, and
// issuers that build CA certificates from a template of their own), and a CA
// below certapi's could vouch for nothing the key cannot already vouch for,
// since name constraints and extended key usage bind every certificate
// below.
func CheckIntermediate(certPEM, chainPEM []byte, key crypto.Signer, opts ImportOptions) (*CA, []Finding, error) {
	if key == nil {
		return nil, nil, errors.New("importing the CA certificate: no CA key given")
	}
	if err := validateDNSName(opts.ClusterDomain, false); err != nil {
		return nil, nil, fmt.Errorf("importing the CA certificate: cluster domain %q: %w", truncate(opts.ClusterDomain), err)
	}
	if opts.MinRemaining < 0 {
		return nil, nil, fmt.Errorf("importing the CA certificate: minimum remaining validity %s is negative; expected zero (the default, %s) or more", opts.MinRemaining, DefaultMinRemaining)
	}
	in, problem := parseImport(certPEM, chainPEM, opts.RootsPEM)
	if problem != nil {
		return nil, nil, &IntermediateError{Problems: []Finding{*problem}}
	}
	c := &importCheck{opts: opts, cert: in.cert, key: key}
	if c.opts.MinRemaining == 0 {
		c.opts.MinRemaining = DefaultMinRemaining
	}
	if c.opts.Now.IsZero() {
		c.opts.Now = time.Now()
	}
	c.checkKey()
	c.checkCertificate()
	path := c.checkChain(in.chain, in.roots)
	c.checkValidity(path)
	if len(c.problems) == 0 {
		c.verify(path)
	}
	if len(c.problems) > 0 {
		return nil, nil, &IntermediateError{Problems: c.problems, Warnings: c.warnings}
	}
	return &CA{Certificate: in.cert, Key: key, Chain: path}, c.warnings, nil
}

// importInput is what CheckIntermediate parsed.
type importInput struct {
	cert         *x509.Certificate
	chain, roots []*x509.Certificate
}

// parseImport parses CheckIntermediate's inputs, or says what is wrong with
// them.
func parseImport(certPEM, chainPEM, rootsPEM []byte) (*importInput, *Finding) {
	malformed := func(format string, args ...any) *Finding {
		return &Finding{Reason: ReasonMalformed, Message: fmt.Sprintf(format, args...)}
	}
	for _, in := range []struct {
		what string
		pem  []byte
	}{{"the signed certificate", certPEM}, {"the chain", chainPEM}, {"the roots", rootsPEM}} {
		if len(in.pem) > MaxImportBytes {
			return nil, malformed("%s: %d bytes; accepted: at most %d", in.what, len(in.pem), MaxImportBytes)
		}
	}
	certs, err := ParseBundle(certPEM)
	if err != nil {
		return nil, malformed("the signed certificate: %v", err)
	}
	in := &importInput{cert: certs[0]}
	seen := map[string]bool{string(in.cert.Raw): true}
	add := func(cs []*x509.Certificate) {
		for _, c := range cs {
			if !seen[string(c.Raw)] {
				seen[string(c.Raw)] = true
				in.chain = append(in.chain, c)
			}
		}
	}
	add(certs[1:])
	if len(bytes.TrimSpace(chainPEM)) > 0 {
		chain, err := ParseBundle(chainPEM)
		if err != nil {
			return nil, malformed("the chain: %v", err)
		}
		add(chain)
	}
	if len(in.chain) > MaxChainLength {
		return nil, malformed("the chain holds %d certificates; accepted: at most %d", len(in.chain), MaxChainLength)
	}
	if len(bytes.TrimSpace(rootsPEM)) > 0 {
		roots, err := ParseBundle(rootsPEM)
		if err != nil {
			return nil, malformed("the roots: %v", err)
		}
		if len(roots) > MaxChainLength {
			return nil, malformed("the roots hold %d certificates; accepted: at most %d", len(roots), MaxChainLength)
		}
		in.roots = roots
	}
	return in, nil
}

// importCheck collects CheckIntermediate's findings.
type importCheck struct {
	opts               ImportOptions
	cert               *x509.Certificate
	key                crypto.Signer
	problems, warnings []Finding
}

func (c *importCheck) refuse(reason ImportReason, format string, args ...any) {
	c.problems = append(c.problems, Finding{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

func (c *importCheck) warn(reason ImportReason, format string, args ...any) {
	c.warnings = append(c.warnings, Finding{Reason: reason, Message: fmt.Sprintf(format, args...)})
}

// checkKey checks both keys and that they are one.
func (c *importCheck) checkKey() {
	keyPub := c.key.Public()
	if err := CheckPublicKey(keyPub); err != nil {
		c.refuse(ReasonUnsupportedKey, "the CA key: %v", err)
	}
	if err := CheckPublicKey(c.cert.PublicKey); err != nil {
		c.refuse(ReasonUnsupportedKey, "the certificate's key: %v", err)
	}
	if pub, ok := keyPub.(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(c.cert.PublicKey) {
		c.refuse(ReasonKeyMismatch, "the certificate certifies the public key %s, not the CA key's (%s); accepted: the certificate signed for the request made with this CA key",
			describeKey(c.cert.PublicKey), describeKey(keyPub))
	}
}

// describeKey names a public key by type, size and key identifier (a hash of
// the public key: public).
func describeKey(pub crypto.PublicKey) string {
	d := keyDescription(pub)
	if id, err := subjectKeyID(pub); err == nil {
		d += " with key identifier " + FormatKeyID(id)
	}
	return d
}

// checkCertificate checks what the certificate itself says.
func (c *importCheck) checkCertificate() {
	cert := c.cert
	if !cert.BasicConstraintsValid || !cert.IsCA {
		c.refuse(ReasonNotCA, "the certificate is not a CA (no basic constraints with cA true); accepted: basicConstraints critical, CA:TRUE, pathlen:0, as requested")
	} else if cert.MaxPathLen != 0 || !cert.MaxPathLenZero {
		limit := "no path length limit"
		if cert.MaxPathLen > 0 {
			limit = fmt.Sprintf("path length %d", cert.MaxPathLen)
		}
		c.warn(ReasonPathLength, "the certificate has %s, so the CA key could sign CAs below it; certapi never does, and name constraints and extended key usage bind any, so it is accepted (requested: path length 0)", limit)
	}
	switch {
	case cert.KeyUsage == 0:
		c.warn(ReasonKeyUsage, "the certificate has no key usage extension; RFC 5280 requires one with keyCertSign in a CA certificate (requested: keyCertSign, cRLSign)")
	case cert.KeyUsage&x509.KeyUsageCertSign == 0:
		c.refuse(ReasonKeyUsage, "the certificate's key usage does not include keyCertSign, so it cannot sign certificates; accepted: key usage with keyCertSign (requested: keyCertSign, cRLSign)")
	}
	if len(cert.SubjectKeyId) == 0 {
		c.refuse(ReasonNoSubjectKeyID, "the certificate has no subject key identifier, which every leaf certapi signs references; accepted: a certificate with one (openssl: subjectKeyIdentifier=hash)")
	}
	c.checkExtKeyUsage(cert, "the certificate", true)
	wider, narrower := constraintGaps(cert, c.opts.ClusterDomain)
	for _, n := range narrower {
		c.refuse(ReasonNameConstraintsTooNarrow, "the certificate's name constraints: %s", n)
	}
	if len(wider) > 0 {
		msg := fmt.Sprintf("the certificate's name constraints are missing or wider than certapi's: %s; requested: critical name constraints permitting DNS %s only and forbidding every IP address, URI and e-mail address",
			strings.Join(wider, "; "), quoteList(PermittedDNSDomains(c.opts.ClusterDomain)))
		if c.opts.AcceptWiderConstraints {
			c.warn(ReasonNameConstraints, "%s (accepted because wider constraints are allowed)", msg)
		} else {
			c.refuse(ReasonNameConstraints, "%s (to import it anyway, allow wider constraints)", msg)
		}
	}
	if !strings.HasPrefix(cert.Subject.CommonName, CACommonNamePrefix) {
		c.warn(ReasonSubject, "the certificate's common name %q does not start with %q, by which certapi tells its own CAs from others in what it reads back", truncate(cert.Subject.CommonName), CACommonNamePrefix)
	}
}

// checkExtKeyUsage refuses extended key usages under which serverAuth leaves
// do not verify (Go and OpenSSL require a chain's usages to nest), and, for
// certapi's own certificate (own), warns about none or more than serverAuth.
func (c *importCheck) checkExtKeyUsage(cert *x509.Certificate, what string, own bool) {
	if len(cert.ExtKeyUsage) == 0 && len(cert.UnknownExtKeyUsage) == 0 {
		if own {
			c.warn(ReasonExtKeyUsage, "%s has no extended key usage, so the CA key is not limited to TLS servers (requested: serverAuth)", what)
		}
		return
	}
	serverAuth, others := false, len(cert.UnknownExtKeyUsage)
	for _, u := range cert.ExtKeyUsage {
		switch u {
		case x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageAny:
			serverAuth = true
		default:
			others++
		}
	}
	switch {
	case !serverAuth:
		c.refuse(ReasonExtKeyUsage, "%s has extended key usages without serverAuth, so no TLS serving certificate below it verifies; accepted: serverAuth among them, or none", what)
	case own && others > 0:
		c.warn(ReasonExtKeyUsage, "%s has %d extended key usage(s) besides serverAuth, so the CA key is not limited to TLS servers (requested: serverAuth only)", what, others)
	}
}

// checkChain builds the path from the certificate to a root out of chain and
// roots, checks each link, and returns the path (the certificate's issuer
// first, the anchor last), or nil after recording why there is none.
func (c *importCheck) checkChain(chain, roots []*x509.Certificate) []*x509.Certificate {
	const accepted = "accepted: the chain up to the root, with the root in it or among the roots given"
	isRoot := func(x *x509.Certificate) bool {
		for _, r := range roots {
			if bytes.Equal(r.Raw, x.Raw) {
				return true
			}
		}
		return false
	}
	if selfSigned(c.cert) {
		c.refuse(ReasonChain, "the certificate is self-signed; accepted: a certificate signed by the organisation's CA")
		return nil
	}
	var path []*x509.Certificate
	onPath := map[string]bool{string(c.cert.Raw): true}
	below := c.cert
	for link := 1; ; link++ {
		if len(path) == MaxChainLength {
			c.refuse(ReasonChain, "no root within %d certificates above the certificate; %s", MaxChainLength, accepted)
			return nil
		}
		issuer, why := findIssuer(below, roots, chain, onPath)
		if issuer == nil {
			c.refuse(ReasonChain, "link %d: %s; %s", link, why, accepted)
			return nil
		}
		path = append(path, issuer)
		onPath[string(issuer.Raw)] = true
		if isRoot(issuer) {
			break
		}
		if selfSigned(issuer) {
			if len(roots) > 0 {
				c.refuse(ReasonChain, "link %d: the chain ends at the self-signed %s, which is not among the roots given; accepted: a chain to one of the roots given (%s)",
					link, describeCert(issuer), describeAll(roots))
				return nil
			}
			break
		}
		below = issuer
	}
	for _, x := range chain {
		if !onPath[string(x.Raw)] {
			c.warn(ReasonUnusedCertificate, "%s in the chain is not on the path from the certificate to the root, and is dropped", describeCert(x))
		}
	}
	// The CAs each issuer has below it on a leaf's path: those of the path
	// between them, certapi's, none else (certapi signs leaves only).
	for i, issuer := range path {
		what := describeCert(issuer) + " in the chain"
		if issuer.MaxPathLen >= 0 && (issuer.MaxPathLen > 0 || issuer.MaxPathLenZero) && issuer.MaxPathLen < i+1 {
			c.refuse(ReasonChain, "link %d: %s has path length %d, but %d CA certificate(s) would be below it (certapi's included); accepted: an issuer whose path length allows them",
				i+1, what, issuer.MaxPathLen, i+1)
		}
		if k, ok := issuer.PublicKey.(interface{ Size() int }); ok && issuer.PublicKeyAlgorithm == x509.RSA && k.Size()*8 < MinRSABits {
			c.refuse(ReasonUnsupportedKey, "%s has an RSA key of %d bits; accepted: at least %d", what, k.Size()*8, MinRSABits)
		}
		c.checkExtKeyUsage(issuer, what, false)
		_, narrower := constraintGaps(issuer, c.opts.ClusterDomain)
		for _, n := range narrower {
			c.refuse(ReasonNameConstraintsTooNarrow, "%s: %s", what, n)
		}
		now := c.opts.Now
		if now.Add(ClockTolerance).Before(issuer.NotBefore) {
			c.refuse(ReasonChain, "%s is not valid until %s; accepted: a chain valid now", what, issuer.NotBefore.UTC().Format(time.RFC3339))
		}
		if !now.Before(issuer.NotAfter) {
			c.refuse(ReasonChain, "%s expired at %s; accepted: a chain valid now", what, issuer.NotAfter.UTC().Format(time.RFC3339))
		}
	}
	return path
}

// findIssuer returns the certificate among roots and chain (roots first) that
// signed below and is not on the path yet, or nil and why there is none.
func findIssuer(below *x509.Certificate, roots, chain []*x509.Certificate, onPath map[string]bool) (*x509.Certificate, string) {
	var tried []string
	for _, set := range [][]*x509.Certificate{roots, chain} {
		for _, x := range set {
			if onPath[string(x.Raw)] || !bytes.Equal(x.RawSubject, below.RawIssuer) {
				continue
			}
			if len(below.AuthorityKeyId) > 0 && len(x.SubjectKeyId) > 0 && !bytes.Equal(below.AuthorityKeyId, x.SubjectKeyId) {
				tried = append(tried, fmt.Sprintf("%s has the issuer's name but key identifier %s, not %s", describeCert(x), FormatKeyID(x.SubjectKeyId), FormatKeyID(below.AuthorityKeyId)))
				continue
			}
			if err := below.CheckSignatureFrom(x); err != nil {
				tried = append(tried, fmt.Sprintf("the signature of %s does not verify with the key of %s (%s)", describeCert(below), describeCert(x), shortError(err)))
				continue
			}
			return x, ""
		}
	}
	if len(tried) > 0 {
		return nil, strings.Join(tried, "; ")
	}
	return nil, fmt.Sprintf("%s was issued by %q, and no certificate of that subject is in the chain or among the roots given", describeCert(below), truncateLong(below.Issuer.String()))
}

// describeAll names certificates for a message.
func describeAll(certs []*x509.Certificate) string {
	names := make([]string, 0, len(certs))
	for _, c := range certs {
		names = append(names, describeCert(c))
	}
	return strings.Join(names, ", ")
}

// checkValidity checks the certificate's times and how long it and its path
// are valid for.
func (c *importCheck) checkValidity(path []*x509.Certificate) {
	now := c.opts.Now
	cert := c.cert
	if now.Add(ClockTolerance).Before(cert.NotBefore) {
		c.refuse(ReasonNotYetValid, "the certificate is not valid until %s, %s from now; accepted: a certificate valid now (clocks may differ by up to %s)",
			cert.NotBefore.UTC().Format(time.RFC3339), cert.NotBefore.Sub(now).Round(time.Second), ClockTolerance)
	}
	end, first := cert.NotAfter, "the certificate"
	for _, x := range path {
		if x.NotAfter.Before(end) {
			end, first = x.NotAfter, describeCert(x)+" in its chain"
		}
	}
	switch left := end.Sub(now); {
	case left <= 0:
		c.refuse(ReasonExpiresTooSoon, "%s expired at %s; accepted: at least %s of validity left", first, end.UTC().Format(time.RFC3339), formatDuration(c.opts.MinRemaining))
	case left < c.opts.MinRemaining:
		c.refuse(ReasonExpiresTooSoon, "%s is valid until %s, %s from now; accepted: at least %s of validity left", first, end.UTC().Format(time.RFC3339), formatDuration(left), formatDuration(c.opts.MinRemaining))
	}
}

// verify has Go's verifier, which kube-apiserver uses, check the whole path
// once every check above passed: a last guard against anything they missed
// (an unhandled critical extension, say).
func (c *importCheck) verify(path []*x509.Certificate) {
	if len(path) == 0 {
		return
	}
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(path[len(path)-1])
	for _, x := range path[:len(path)-1] {
		inter.AddCert(x)
	}
	at := c.opts.Now
	if at.Before(c.cert.NotBefore) { // within ClockTolerance, checked above
		at = c.cert.NotBefore
	}
	if _, err := c.cert.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		c.refuse(ReasonChain, "Go's certificate verifier refuses the path to %s: %s", describeCert(path[len(path)-1]), shortError(err))
	}
}

// formatDuration writes a duration in days and hours when it is that long.
func formatDuration(d time.Duration) string {
	if d < 24*time.Hour {
		return d.Round(time.Second).String()
	}
	days := d / (24 * time.Hour)
	hours := (d - days*24*time.Hour) / time.Hour
	return fmt.Sprintf("%dd%dh", days, hours)
}
