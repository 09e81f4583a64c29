package signer

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// IntermediateOptions says what certapi's CA certificate request asks an
// organisation's CA for.
type IntermediateOptions struct {
	// ClusterDomain is the cluster's DNS domain, e.g. "cluster.local": the
	// requested name constraints permit names under "svc" and
	// "svc.<ClusterDomain>" only, as NewCA's do. Required.
	ClusterDomain string
	// CommonName is the requested subject common name; default
	// "certapi-ca@<unix seconds of Now>", the CACommonNamePrefix by which the
	// injector and the recovery tell certapi's CAs from others.
	CommonName string
	// Organization, when set, is the requested subject organization (many
	// organisations' signing policies require one).
	Organization string
	// Now dates the default common name; zero means time.Now().
	Now time.Time
}

// The extensions an intermediate's certificate request asks for, by OID.
var (
	oidExtBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidExtKeyUsage         = asn1.ObjectIdentifier{2, 5, 29, 15}
	oidExtNameConstraints  = asn1.ObjectIdentifier{2, 5, 29, 30}
	oidExtExtKeyUsage      = asn1.ObjectIdentifier{2, 5, 29, 37}
)

// IntermediateRequest returns a PEM PKCS#10 certificate request, signed with
// key, for certapi's CA to be made an intermediate of an organisation's CA.
// Its extensionRequest attribute asks for exactly what a CA of certapi's
// carries, encoded as NewCA encodes it: basic constraints cA true with path
// length 0 (critical), key usage keyCertSign and cRLSign (critical), extended
// key usage serverAuth, and the critical name constraints that permit DNS
// names under "svc" and "svc.<ClusterDomain>" only and forbid every IP
// address, URI and e-mail address (see NewCA, ForbiddingConstraint). It asks
// for no subject alternative name.
//
// A request is only a request: an upstream CA may drop or replace requested
// extensions (`openssl x509 -req` copies none unless told to with
// -copy_extensions; many signing services apply a profile of their own). That
// is why the signed certificate is imported through CheckIntermediate, which
// checks what was really signed.
//
// key is used only through crypto.Signer (it may live in a hardware module);
// its public key must pass CheckPublicKey, as every CA's must.
func IntermediateRequest(key crypto.Signer, opts IntermediateOptions) ([]byte, error) {
	if key == nil {
		return nil, fmt.Errorf("making the CA certificate request: no key given")
	}
	if err := validateDNSName(opts.ClusterDomain, false); err != nil {
		return nil, fmt.Errorf("making the CA certificate request: cluster domain %q: %w", truncate(opts.ClusterDomain), err)
	}
	if err := CheckPublicKey(key.Public()); err != nil {
		return nil, fmt.Errorf("making the CA certificate request: the CA key: %w", err)
	}
	cn := opts.CommonName
	if cn == "" {
		now := opts.Now
		if now.IsZero() {
			now = time.Now()
		}
		cn = fmt.Sprintf("%s%d", CACommonNamePrefix, now.Unix())
	}
	if len(cn) > MaxCommonNameLength {
		return nil, fmt.Errorf("making the CA certificate request: common name of %d characters; accepted: at most %d", len(cn), MaxCommonNameLength)
	}
	subject := pkix.Name{CommonName: cn}
	if opts.Organization != "" {
		if len(opts.Organization) > MaxCommonNameLength {
			return nil, fmt.Errorf("making the CA certificate request: organization of %d characters; accepted: at most %d", len(opts.Organization), MaxCommonNameLength)
		}
		subject.Organization = []string{opts.Organization}
	}
	exts, err := intermediateExtensions(opts.ClusterDomain)
	if err != nil {
		return nil, fmt.Errorf("making the CA certificate request: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:         subject,
		ExtraExtensions: exts,
	}, key)
	if err != nil {
		return nil, fmt.Errorf("making the CA certificate request: signing it with the CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// intermediateExtensions returns the extensions IntermediateRequest asks
// for. They are taken from a certificate that crypto/x509 encodes from the
// same template fields NewCA uses (setCAConstraints), signed with a
// throw-away key and never used: so the name constraints requested are
// byte for byte those of NewCA, and the CA key signs nothing but the request.
func intermediateExtensions(clusterDomain string) ([]pkix.Extension, error) {
	throwaway, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating a throw-away key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		NotBefore:             time.Unix(0, 0),
		NotAfter:              time.Unix(1, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	setCAConstraints(tmpl, clusterDomain)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, throwaway.Public(), throwaway)
	if err != nil {
		return nil, fmt.Errorf("encoding the requested extensions: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("encoding the requested extensions: %w", err)
	}
	var exts []pkix.Extension
	for _, oid := range []asn1.ObjectIdentifier{oidExtBasicConstraints, oidExtKeyUsage, oidExtExtKeyUsage, oidExtNameConstraints} {
		found := false
		for _, e := range cert.Extensions {
			if e.Id.Equal(oid) {
				exts = append(exts, e)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("encoding the requested extensions: extension %s missing", oid)
		}
	}
	return exts, nil
}
