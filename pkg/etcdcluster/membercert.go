package etcdcluster

import (
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// DefaultMemberCertDuration is the lifetime of the certificate a member issues itself at start. It is
// renewed in place (etcd reads its certificate files at every handshake) when two thirds have passed.
const DefaultMemberCertDuration = 7 * 24 * time.Hour

// MemberCertificate is a member's own certificate and key, PEM. CertPEM is the certificate followed by
// the CA's Chain.
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
	key, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		return nil, fmt.Errorf("issuing etcd member certificate: %w", err)
	}
	return ca.issueMember(name, hosts, key.Public(), key, now, duration)
}

// issueMember issues the member certificate of IssueMember for pub. key is pub's private key when this
// process made it (it goes into KeyPEM), nil when a joining member holds it (enrollment).
func (ca *PeerCA) issueMember(name string, hosts []string, pub crypto.PublicKey, key crypto.Signer, now time.Time, duration time.Duration) (*MemberCertificate, error) {
	if ca.Key == nil {
		return nil, errors.New("issuing etcd member certificate: this member does not hold the peer CA's key")
	}
	if duration <= 0 {
		duration = DefaultMemberCertDuration
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
		} else if h != "" && h != "localhost" && !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Certificate, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("issuing etcd member certificate: signing: %w", err)
	}
	var keyPEM []byte
	if key != nil {
		if keyPEM, err = signer.EncodeKeyPEM(key); err != nil {
			return nil, fmt.Errorf("issuing etcd member certificate: %w", err)
		}
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("issuing etcd member certificate: parsing: %w", err)
	}
	chain := []*x509.Certificate{cert}
	if len(ca.Chain) > 0 {
		bridges, err := signer.ParseBundle(ca.Chain)
		if err != nil {
			return nil, fmt.Errorf("issuing etcd member certificate: the peer CA's chain: %w", err)
		}
		for _, b := range bridges {
			if b.NotAfter.After(now) {
				chain = append(chain, b)
			}
		}
	}
	return newMemberCertificate(cert, signer.EncodeBundle(chain...), keyPEM, now), nil
}

// pkiFiles are where a member keeps its TLS material for etcd, which reads files: its certificate and
// key at every handshake (so a renewal is a rename), the trust bundle at start. The certificate (with the
// CA's chain) and its key are one file, given to etcd as both its certificate and its key file (Go's
// tls.X509KeyPair takes the CERTIFICATE blocks of one and the PRIVATE KEY block of the other): one rename
// replaces both, so no handshake ever pairs a certificate with another certificate's key.
type pkiFiles struct {
	dir                              string
	CertFile, KeyFile, TrustedCAFile string
}

func newPKIFiles(dir string) pkiFiles {
	pair := filepath.Join(dir, "member.pem")
	return pkiFiles{dir: dir, CertFile: pair, KeyFile: pair, TrustedCAFile: filepath.Join(dir, "ca.crt")}
}

// write stores the member certificate with its key, and the trust bundle, each mode 0600 in a 0700
// directory, each by rename so that a handshake never reads half a file. The key is on the member's
// private data volume only; the peer CA's key is never written here.
func (f pkiFiles) write(mc *MemberCertificate, trust []byte) error {
	if err := os.MkdirAll(f.dir, 0o700); err != nil {
		return fmt.Errorf("creating %q: %w", f.dir, err)
	}
	if err := os.Chmod(f.dir, 0o700); err != nil {
		return fmt.Errorf("restricting %q to its owner: %w", f.dir, err)
	}
	pair := append(append([]byte{}, mc.CertPEM...), mc.KeyPEM...)
	for _, w := range []struct {
		path string
		data []byte
	}{{f.TrustedCAFile, trust}, {f.CertFile, pair}} {
		tmp := w.path + ".tmp"
		if err := os.WriteFile(tmp, w.data, 0o600); err != nil {
			return fmt.Errorf("writing %q: %w", tmp, err)
		}
		if err := os.Rename(tmp, w.path); err != nil {
			return fmt.Errorf("replacing %q: %w", w.path, err)
		}
	}
	// An earlier version kept the certificate and its key in two files: remove the key.
	for _, old := range []string{"member.crt", "member.key"} {
		if err := os.Remove(filepath.Join(f.dir, old)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing %q: %w", old, err)
		}
	}
	return nil
}

// remove deletes the member certificate, its key and the trust bundle, so that the member enrolls again.
func (f pkiFiles) remove() error {
	for _, p := range []string{f.CertFile, f.TrustedCAFile} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("removing %q: %w", p, err)
		}
	}
	return nil
}

// read loads the member certificate stored on the volume, when trust verifies it and more than a third
// of its life is left (a member that restarts keeps it instead of enrolling again); the error says why
// not otherwise.
func (f pkiFiles) read(name string, trust []byte, now time.Time) (*MemberCertificate, error) {
	pair, err := os.ReadFile(f.CertFile)
	if err != nil {
		return nil, fmt.Errorf("no member certificate on this member's volume: %w", err)
	}
	var certPEM, keyPEM []byte
	for rest := pair; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			certPEM = append(certPEM, pem.EncodeToMemory(block)...)
		} else {
			keyPEM = append(keyPEM, pem.EncodeToMemory(block)...)
		}
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("the member certificate on this member's volume is unusable: %w", err)
	}
	certs, err := signer.ParseBundle(certPEM)
	if err != nil {
		return nil, fmt.Errorf("the member certificate on this member's volume is unusable: %w", err)
	}
	leaf := certs[0]
	if leaf.Subject.CommonName != name {
		return nil, fmt.Errorf("the member certificate on this member's volume is %q's", leaf.Subject.CommonName)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(trust)
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("the peer CA bundle does not verify the member certificate on this member's volume: %w", err)
	}
	if left, life := leaf.NotAfter.Sub(now), leaf.NotAfter.Sub(leaf.NotBefore); left < life/3 {
		return nil, fmt.Errorf("the member certificate on this member's volume ends at %s", leaf.NotAfter.Format(time.RFC3339))
	}
	return &MemberCertificate{CertPEM: certPEM, KeyPEM: keyPEM, NotAfter: leaf.NotAfter, RenewAt: leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3)}, nil
}
