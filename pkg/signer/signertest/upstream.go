package signertest

import (
	"crypto"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// Root is an organisation's CA for tests of certapi as an intermediate: it signs certapi's CA
// certificate requests (signer.IntermediateRequest) as an upstream that copies the requested extensions
// does (`openssl x509 -req -copy_extensions copyall`).
type Root struct {
	Certificate *x509.Certificate
	Key         crypto.Signer
}

// NewRoot makes a self-signed root named name, valid from a day before now for ten years.
func NewRoot(tb testing.TB, name string, now time.Time) *Root {
	tb.Helper()
	key := ECKey(tb, elliptic.P256())
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"Example Org"}},
		NotBefore:             now.Add(-24 * time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		SubjectKeyId:          keyID(tb, key.Public()),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		tb.Fatalf("making the test root: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	return &Root{Certificate: cert, Key: key}
}

// PEM is the root's certificate in PEM.
func (r *Root) PEM() []byte { return signer.EncodeBundle(r.Certificate) }

// SignOptions changes what Root.Sign signs.
type SignOptions struct {
	// NotBefore and NotAfter: default an hour before now and a year after it.
	NotBefore, NotAfter time.Time
	// NotCA drops the basic constraints (the certificate is then not a CA).
	NotCA bool
	// NoNameConstraints drops the requested name constraints (a wider CA than certapi's).
	NoNameConstraints bool
}

// Intermediate returns a CA of certapi's under the root: a P-256 key, its request
// (signer.IntermediateRequest for ClusterDomain), signed by the root as of now and imported with
// signer.CheckIntermediate against the root, as `kubectl certapi ca import` would.
func (r *Root) Intermediate(tb testing.TB, now time.Time) *signer.CA {
	tb.Helper()
	key := ECKey(tb, elliptic.P256())
	csr, err := signer.IntermediateRequest(key, signer.IntermediateOptions{ClusterDomain: ClusterDomain})
	if err != nil {
		tb.Fatal(err)
	}
	ca, _, err := signer.CheckIntermediate(r.Sign(tb, csr, now, SignOptions{}), r.PEM(), key, signer.ImportOptions{ClusterDomain: ClusterDomain})
	if err != nil {
		tb.Fatal(err)
	}
	return ca
}

// The requested extensions SignOptions can drop, by OID.
var (
	oidBasicConstraints = asn1.ObjectIdentifier{2, 5, 29, 19}
	oidNameConstraints  = asn1.ObjectIdentifier{2, 5, 29, 30}
)

// Sign signs the PEM certificate request csrPEM and returns the certificate in PEM.
func (r *Root) Sign(tb testing.TB, csrPEM []byte, now time.Time, opts SignOptions) []byte {
	tb.Helper()
	block, _ := pem.Decode(csrPEM)
	if block == nil {
		tb.Fatal("signing a CA request: no PEM block")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		tb.Fatalf("signing a CA request: %v", err)
	}
	if err := csr.CheckSignature(); err != nil {
		tb.Fatalf("signing a CA request: %v", err)
	}
	if opts.NotBefore.IsZero() {
		opts.NotBefore = now.Add(-time.Hour)
	}
	if opts.NotAfter.IsZero() {
		opts.NotAfter = now.Add(365 * 24 * time.Hour)
	}
	var exts []pkix.Extension
	for _, e := range csr.Extensions {
		if (opts.NotCA && e.Id.Equal(oidBasicConstraints)) || (opts.NoNameConstraints && e.Id.Equal(oidNameConstraints)) {
			continue
		}
		exts = append(exts, e)
	}
	tmpl := &x509.Certificate{
		SerialNumber:    serial(tb),
		Subject:         csr.Subject,
		NotBefore:       opts.NotBefore,
		NotAfter:        opts.NotAfter,
		SubjectKeyId:    keyID(tb, csr.PublicKey),
		ExtraExtensions: exts,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, r.Certificate, csr.PublicKey, r.Key)
	if err != nil {
		tb.Fatalf("signing a CA request: %v", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func serial(tb testing.TB) *big.Int {
	tb.Helper()
	s, err := signer.RandomSerial()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// keyID is the SHA-1 of the subject public key (RFC 5280 section 4.2.1.2, method 1).
func keyID(tb testing.TB, pub crypto.PublicKey) []byte {
	tb.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		tb.Fatal(err)
	}
	var spki struct {
		Algorithm pkix.AlgorithmIdentifier
		PublicKey asn1.BitString
	}
	if _, err := asn1.Unmarshal(der, &spki); err != nil {
		tb.Fatal(err)
	}
	sum := sha1.Sum(spki.PublicKey.Bytes)
	return sum[:]
}
