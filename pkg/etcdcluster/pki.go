package etcdcluster

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// DefaultPeerCADuration is the peer CA's lifetime.
const DefaultPeerCADuration = 10 * 365 * 24 * time.Hour

// PeerCA is the certificate authority of the members' mutual TLS: every member trusts Bundle and
// presents a certificate Key signed, for peer traffic (raft) and client traffic (certapi's storage and
// the members' calls to each other) alike. It is not certapi's serving CA and signs nothing else.
type PeerCA struct {
	Certificate *x509.Certificate
	Key         crypto.Signer
	// Bundle is every CA certificate a member trusts, PEM: Certificate, and during a rotation also the
	// CA it replaces. Empty means Certificate alone.
	Bundle []byte
	// Chain is PEM: Certificate cross-signed by the CA it replaced, then that CA cross-signed by its own
	// predecessor, and so on, as long as each signer is valid (empty before the first rotation). Every
	// member certificate carries it, so that a process that loaded an earlier CA as its trust when it
	// started (etcd reads its trusted CA file only at start, certapi's storage client only at process
	// start) still verifies certificates the new CA signed. See Successor.
	Chain []byte
}

// NewPeerCA makes a self-signed ECDSA P-256 peer CA valid from now (backdated by signer.Backdate).
func NewPeerCA(now time.Time, duration time.Duration) (*PeerCA, error) {
	if duration <= 0 {
		duration = DefaultPeerCADuration
	}
	key, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		return nil, fmt.Errorf("creating etcd peer CA: %w", err)
	}
	serial, err := signer.RandomSerial()
	if err != nil {
		return nil, fmt.Errorf("creating etcd peer CA: %w", err)
	}
	now = now.UTC().Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		// The serial in the name keeps two CAs made in the same second apart (a rotation).
		Subject:               pkix.Name{CommonName: fmt.Sprintf("certapi-etcd-peer-ca@%d-%08x", now.Unix(), serial.Uint64()&0xffffffff)},
		NotBefore:             now.Add(-signer.Backdate),
		NotAfter:              now.Add(duration),
		IsCA:                  true,
		BasicConstraintsValid: true,
		// No path length limit: the cross-signed certificates of Chain sit between this CA and the
		// member certificates of its successors.
		MaxPathLen: -1,
		KeyUsage:   x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("creating etcd peer CA: signing: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("creating etcd peer CA: parsing: %w", err)
	}
	return &PeerCA{Certificate: cert, Key: key}, nil
}

// Successor makes the CA that replaces ca in a rotation: a new CA (NewPeerCA) whose Bundle trusts both
// (members that have not yet re-issued their certificates present ca's), and whose Chain is the new CA
// cross-signed by ca (valid no longer than ca), followed by ca's own Chain. A process that trusts only
// ca (or an earlier CA of the Chain) then verifies a member certificate of the new CA through the chain,
// with nothing reloaded. ca must be settled: its Bundle trusts only itself.
func (ca *PeerCA) Successor(now time.Time, duration time.Duration) (*PeerCA, error) {
	if ca.Rotating() {
		return nil, errors.New("creating the successor of the etcd peer CA: a rotation is under way (its bundle trusts another CA)")
	}
	next, err := NewPeerCA(now, duration)
	if err != nil {
		return nil, err
	}
	serial, err := signer.RandomSerial()
	if err != nil {
		return nil, fmt.Errorf("cross-signing the new etcd peer CA: %w", err)
	}
	notAfter := next.Certificate.NotAfter
	if notAfter.After(ca.Certificate.NotAfter) {
		notAfter = ca.Certificate.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               next.Certificate.Subject,
		SubjectKeyId:          next.Certificate.SubjectKeyId,
		NotBefore:             next.Certificate.NotBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            -1,
		KeyUsage:              next.Certificate.KeyUsage,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Certificate, next.Key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("cross-signing the new etcd peer CA: %w", err)
	}
	bridge, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("cross-signing the new etcd peer CA: parsing: %w", err)
	}
	chain := []*x509.Certificate{bridge}
	older, err := signer.ParseBundle(ca.Chain)
	if len(ca.Chain) > 0 && err != nil {
		return nil, fmt.Errorf("reading the chain of the etcd peer CA: %w", err)
	}
	for _, c := range older {
		if c.NotAfter.After(now) {
			chain = append(chain, c)
		}
	}
	next.Chain = signer.EncodeBundle(chain...)
	next.Bundle = signer.EncodeBundle(next.Certificate, ca.Certificate)
	return next, nil
}

// Settled is ca once every member presents a certificate it signed: its Bundle trusts only itself.
func (ca *PeerCA) Settled() *PeerCA {
	out := *ca
	out.Bundle = ca.CertificatePEM()
	return &out
}

// Rotating reports whether ca's Bundle trusts a CA besides ca: a rotation to ca is under way.
func (ca *PeerCA) Rotating() bool {
	trusted, err := signer.ParseBundle(ca.TrustPEM())
	if err != nil {
		return false
	}
	for _, c := range trusted {
		if !c.Equal(ca.Certificate) {
			return true
		}
	}
	return false
}

// Signed reports whether leaf was signed by ca.
func (ca *PeerCA) Signed(leaf *x509.Certificate) bool {
	return leaf != nil && leaf.CheckSignatureFrom(ca.Certificate) == nil
}

// ErrPeerCANotVouched means a peer CA was offered that no CA a member trusts vouches for: not the same CA,
// and no cross-signature in its Chain leads to it from a trusted one. Successor makes every legitimate
// replacement; a CA made anywhere else (written into the Secret by whoever holds certapi's token) would
// have members re-issue their certificates from a CA their peers do not trust, and lose the quorum.
var ErrPeerCANotVouched = errors.New("the etcd peer CA is not vouched for by the CA this member trusts")

// Vouches returns nil when next may replace ca: it is the same CA (a bundle settling after a rotation),
// or its Chain leads from ca to it through cross-signatures, as Successor makes it (over several
// rotations, as long as each cross-signature is in the Chain). Otherwise the error wraps
// ErrPeerCANotVouched.
func (ca *PeerCA) Vouches(next *PeerCA) error {
	return vouchedBy([]*x509.Certificate{ca.Certificate}, next)
}

// vouchedBy returns nil when next's certificate is one of trusted, or a cross-signature in next's Chain
// made by a trusted CA (or by a CA so vouched for) certifies next's key. Only signatures are checked:
// validity periods are Successor's to keep (it drops expired cross-signatures), and a trusted CA vouches
// for its successor as long as the member trusts it.
func vouchedBy(trusted []*x509.Certificate, next *PeerCA) error {
	if next == nil || next.Certificate == nil {
		return fmt.Errorf("%w: no CA given", ErrPeerCANotVouched)
	}
	for _, t := range trusted {
		if t.Equal(next.Certificate) {
			return nil
		}
	}
	chain, err := signer.ParseBundle(next.Chain)
	if len(next.Chain) > 0 && err != nil {
		return fmt.Errorf("%w: its chain does not parse: %v", ErrPeerCANotVouched, err)
	}
	nextKey, ok := next.Certificate.PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok {
		return fmt.Errorf("%w: its key is of an unknown type", ErrPeerCANotVouched)
	}
	vouched := slices.Clone(trusted)
	used := make([]bool, len(chain))
	for progress := true; progress; {
		progress = false
		for i, c := range chain {
			if used[i] || !c.IsCA {
				continue
			}
			for _, v := range vouched {
				if c.CheckSignatureFrom(v) != nil {
					continue
				}
				if nextKey.Equal(c.PublicKey) {
					return nil
				}
				vouched, used[i], progress = append(vouched, c), true, true
				break
			}
		}
	}
	return fmt.Errorf("%w: %s is neither a CA it trusts (%s) nor cross-signed by one in its chain", ErrPeerCANotVouched,
		next.Certificate.Subject.CommonName, commonNames(trusted))
}

// heldTrustVouches returns nil when the trust bundle in file (what a member trusted when it last ran)
// vouches for ca, or when there is no such file (a member's first start); otherwise the error wraps
// ErrPeerCANotVouched.
func heldTrustVouches(file string, ca *PeerCA) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the peer CAs this member trusted before: %w", err)
	}
	trusted, err := signer.ParseBundle(data)
	if err != nil {
		return fmt.Errorf("reading the peer CAs this member trusted before (%s): %w", file, err)
	}
	return vouchedBy(trusted, ca)
}

// commonNames lists the certificates' common names, for a message.
func commonNames(certs []*x509.Certificate) string {
	names := make([]string, len(certs))
	for i, c := range certs {
		names[i] = c.Subject.CommonName
	}
	return strings.Join(names, ", ")
}

// Equal reports whether ca and other hold the same certificate, bundle and chain.
func (ca *PeerCA) Equal(other *PeerCA) bool {
	if ca == nil || other == nil {
		return ca == other
	}
	return ca.Certificate.Equal(other.Certificate) && string(ca.TrustPEM()) == string(other.TrustPEM()) && string(ca.Chain) == string(other.Chain)
}

// LoadPeerCA reads a peer CA from PEM: its certificate, its key (empty: the CA's public part only, with
// which a member enrolls rather than issue its own certificate), the bundle to trust (empty: the
// certificate alone) and its chain (empty: none; see PeerCA.Chain). The key must belong to the
// certificate, and the bundle must hold the certificate.
func LoadPeerCA(certPEM, keyPEM, bundlePEM, chainPEM []byte) (*PeerCA, error) {
	certs, err := signer.ParseBundle(certPEM)
	if err != nil || len(certs) != 1 {
		return nil, fmt.Errorf("loading etcd peer CA: expected exactly one CA certificate in PEM (%v)", err)
	}
	pub, ok := certs[0].PublicKey.(interface{ Equal(crypto.PublicKey) bool })
	if !ok {
		return nil, errors.New("loading etcd peer CA: unsupported public key")
	}
	if !certs[0].IsCA {
		return nil, errors.New("loading etcd peer CA: the certificate is not a CA")
	}
	ca := &PeerCA{Certificate: certs[0]}
	if len(keyPEM) > 0 {
		key, err := signer.ParseKeyPEM(keyPEM)
		if err != nil {
			return nil, fmt.Errorf("loading etcd peer CA key: %w", err)
		}
		if !pub.Equal(key.Public()) {
			return nil, errors.New("loading etcd peer CA: the key does not belong to the certificate")
		}
		ca.Key = key
	}
	if len(bundlePEM) > 0 {
		trusted, err := signer.ParseBundle(bundlePEM)
		if err != nil {
			return nil, fmt.Errorf("loading etcd peer CA bundle: %w", err)
		}
		found := false
		for _, c := range trusted {
			found = found || c.Equal(certs[0])
		}
		if !found {
			return nil, errors.New("loading etcd peer CA: the bundle does not hold the signing CA certificate")
		}
		ca.Bundle = bundlePEM
	}
	if len(chainPEM) > 0 {
		chain, err := signer.ParseBundle(chainPEM)
		if err != nil {
			return nil, fmt.Errorf("loading etcd peer CA chain: %w", err)
		}
		if string(chain[0].RawSubject) != string(certs[0].RawSubject) || !pub.Equal(chain[0].PublicKey) {
			return nil, errors.New("loading etcd peer CA: the chain does not begin with the CA cross-signed by its predecessor")
		}
		ca.Chain = chainPEM
	}
	return ca, nil
}

// CertificatePEM is the CA certificate, PEM.
func (ca *PeerCA) CertificatePEM() []byte { return signer.EncodeBundle(ca.Certificate) }

// KeyPEM is the CA private key, PKCS#8 PEM: for the members' etcd (sealed), or the peer CA's Secret
// where the key is kept there (the custody of earlier versions).
func (ca *PeerCA) KeyPEM() ([]byte, error) { return signer.EncodeKeyPEM(ca.Key) }

// TrustPEM is what members trust: Bundle, or the certificate alone.
func (ca *PeerCA) TrustPEM() []byte {
	if len(ca.Bundle) > 0 {
		return ca.Bundle
	}
	return ca.CertificatePEM()
}
