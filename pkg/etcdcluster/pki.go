package etcdcluster

import (
	"crypto"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// DefaultPeerCADuration is the peer CA's lifetime.
const DefaultPeerCADuration = 10 * 365 * 24 * time.Hour

// DefaultMemberCertDuration is the lifetime of the certificate a member issues itself at start. It is
// renewed in place (etcd reads its certificate files at every handshake) when two thirds have passed.
const DefaultMemberCertDuration = 7 * 24 * time.Hour

// PeerCA is the certificate authority of the members' mutual TLS: every member trusts Bundle and
// presents a certificate Key signed, for peer traffic (raft) and client traffic (certapi's storage and
// the members' calls to each other) alike. It is not certapi's serving CA and signs nothing else.
type PeerCA struct {
	Certificate *x509.Certificate
	Key         crypto.Signer
	// Bundle is every CA certificate a member trusts, PEM: Certificate, and during a rotation also the
	// other CA. Empty means Certificate alone.
	Bundle []byte
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
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("certapi-etcd-peer-ca@%d", now.Unix())},
		NotBefore:             now.Add(-signer.Backdate),
		NotAfter:              now.Add(duration),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
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

// LoadPeerCA reads a peer CA from PEM: its certificate, its key, and the bundle to trust (empty: the
// certificate alone). The key must belong to the certificate, and the bundle must hold the certificate.
func LoadPeerCA(certPEM, keyPEM, bundlePEM []byte) (*PeerCA, error) {
	certs, err := signer.ParseBundle(certPEM)
	if err != nil || len(certs) != 1 {
		return nil, fmt.Errorf("loading etcd peer CA: expected exactly one CA certificate in PEM (%v)", err)
	}
	key, err := signer.ParseKeyPEM(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("loading etcd peer CA key: %w", err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(certs[0].PublicKey) {
		return nil, errors.New("loading etcd peer CA: the key does not belong to the certificate")
	}
	if !certs[0].IsCA {
		return nil, errors.New("loading etcd peer CA: the certificate is not a CA")
	}
	ca := &PeerCA{Certificate: certs[0], Key: key}
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
	return ca, nil
}

// CertificatePEM is the CA certificate, PEM.
func (ca *PeerCA) CertificatePEM() []byte { return signer.EncodeBundle(ca.Certificate) }

// KeyPEM is the CA private key, PKCS#8 PEM. It goes only into the peer CA's Secret.
func (ca *PeerCA) KeyPEM() ([]byte, error) { return signer.EncodeKeyPEM(ca.Key) }

// TrustPEM is what members trust: Bundle, or the certificate alone.
func (ca *PeerCA) TrustPEM() []byte {
	if len(ca.Bundle) > 0 {
		return ca.Bundle
	}
	return ca.CertificatePEM()
}

// MemberCertificate is a member's own certificate and key, PEM.
type MemberCertificate struct {
	CertPEM, KeyPEM []byte
	NotAfter        time.Time
	// RenewAt is when two thirds of its life have passed.
	RenewAt time.Time
}

// IssueMember issues a member certificate for both ends of TLS (serverAuth and clientAuth), for the DNS
// names and IP addresses in hosts plus localhost, 127.0.0.1 and ::1, with a fresh ECDSA P-256 key. Its
// lifetime is capped by the CA's.
func (ca *PeerCA) IssueMember(name string, hosts []string, now time.Time, duration time.Duration) (*MemberCertificate, error) {
	if duration <= 0 {
		duration = DefaultMemberCertDuration
	}
	key, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		return nil, fmt.Errorf("issuing etcd member certificate: %w", err)
	}
	serial, err := signer.RandomSerial()
	if err != nil {
		return nil, fmt.Errorf("issuing etcd member certificate: %w", err)
	}
	now = now.UTC().Truncate(time.Second)
	notAfter := now.Add(duration)
	if notAfter.After(ca.Certificate.NotAfter) {
		notAfter = ca.Certificate.NotAfter
	}
	if !notAfter.After(now) {
		return nil, fmt.Errorf("issuing etcd member certificate: the peer CA expired at %s", ca.Certificate.NotAfter.Format(time.RFC3339))
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-signer.Backdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			if !ip.IsLoopback() {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if h != "" && h != "localhost" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Certificate, key.Public(), ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing etcd member certificate: signing: %w", err)
	}
	keyPEM, err := signer.EncodeKeyPEM(key)
	if err != nil {
		return nil, fmt.Errorf("issuing etcd member certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("issuing etcd member certificate: parsing: %w", err)
	}
	life := cert.NotAfter.Sub(now)
	return &MemberCertificate{
		CertPEM:  signer.EncodeBundle(cert),
		KeyPEM:   keyPEM,
		NotAfter: cert.NotAfter,
		RenewAt:  now.Add(life * 2 / 3),
	}, nil
}

// pkiFiles are where a member keeps its TLS material for etcd, which reads files: its certificate and
// key at every handshake (so a renewal is a rename), the trust bundle at start.
type pkiFiles struct {
	dir                              string
	CertFile, KeyFile, TrustedCAFile string
}

func newPKIFiles(dir string) pkiFiles {
	return pkiFiles{dir: dir, CertFile: filepath.Join(dir, "member.crt"), KeyFile: filepath.Join(dir, "member.key"), TrustedCAFile: filepath.Join(dir, "ca.crt")}
}

// write stores the member certificate, its key and the trust bundle, each mode 0600 in a 0700
// directory, each by rename so that a handshake never reads half a file. The key is on the member's
// private data volume only; the peer CA's key is never written here.
func (f pkiFiles) write(mc *MemberCertificate, trust []byte) error {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("creating %q: %w", f.dir, err)
	}
	if err := os.Chmod(f.dir, 0o700); err != nil {
		return fmt.Errorf("restricting %q to its owner: %w", f.dir, err)
	}
	// Key before certificate: a handshake between the two renames pairs the old certificate with the new
	// key and fails, once; the other order would too. etcd retries.
	for _, w := range []struct {
		path string
		data []byte
	}{{f.TrustedCAFile, trust}, {f.KeyFile, mc.KeyPEM}, {f.CertFile, mc.CertPEM}} {
		tmp := w.path + ".tmp"
		if err := os.WriteFile(tmp, w.data, 0o600); err != nil {
			return fmt.Errorf("writing %q: %w", tmp, err)
		}
		if err := os.Rename(tmp, w.path); err != nil {
			return fmt.Errorf("replacing %q: %w", w.path, err)
		}
	}
	return nil
}
