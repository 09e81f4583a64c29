package framework

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certapiServiceDNSNames are the names certapi's serving certificate is issued for. kube-apiserver's
// aggregator checks <service>.<namespace>.svc when it proxies to the APIService.
var certapiServiceDNSNames = []string{
	"certapi.certapi-system.svc",
	"certapi.certapi-system.svc.cluster.local",
	"localhost",
}

// PKI holds the paths of every key and certificate the framework generates under <Dir>/pki.
// All private keys are PKCS#8 PEM, all certificates PEM.
type PKI struct {
	// Dir is the directory holding the files.
	Dir string

	// ServerCA signs kube-apiserver's serving certificate.
	ServerCACert string
	ServerCAKey  string
	// APIServerCert and APIServerKey are kube-apiserver's serving certificate and key.
	APIServerCert string
	APIServerKey  string

	// ClientCA signs client certificates (admin and UserConfig).
	ClientCACert string
	ClientCAKey  string
	// AdminCert and AdminKey are the admin client certificate (CN admin, O system:masters).
	AdminCert string
	AdminKey  string
	// KubeletClientCert and KubeletClientKey are kube-apiserver's client certificate for kubelets
	// (CN kube-apiserver-kubelet-client, O system:masters), for logs, exec and port-forward on the node.
	KubeletClientCert string
	KubeletClientKey  string

	// FrontProxyCA is the requestheader client CA.
	FrontProxyCACert string
	FrontProxyCAKey  string
	// FrontProxyClientCert and FrontProxyClientKey are kube-apiserver's proxy client certificate
	// (CN front-proxy-client), presented to aggregated API servers.
	FrontProxyClientCert string
	FrontProxyClientKey  string

	// ServiceAccountKey and ServiceAccountPub are the service-account token signing key pair.
	ServiceAccountKey string
	ServiceAccountPub string

	// CertapiCACert and CertapiCAKey sign certapi's serving certificate. CertapiCACert is the
	// APIService caBundle.
	CertapiCACert string
	CertapiCAKey  string
	// CertapiCert and CertapiKey are certapi's serving certificate and key.
	CertapiCert string
	CertapiKey  string
}

func newPKIPaths(dir string) *PKI {
	p := func(name string) string { return filepath.Join(dir, name) }
	return &PKI{
		Dir:                  dir,
		ServerCACert:         p("server-ca.crt"),
		ServerCAKey:          p("server-ca.key"),
		APIServerCert:        p("kube-apiserver.crt"),
		APIServerKey:         p("kube-apiserver.key"),
		ClientCACert:         p("client-ca.crt"),
		ClientCAKey:          p("client-ca.key"),
		AdminCert:            p("admin.crt"),
		AdminKey:             p("admin.key"),
		KubeletClientCert:    p("kubelet-client.crt"),
		KubeletClientKey:     p("kubelet-client.key"),
		FrontProxyCACert:     p("front-proxy-ca.crt"),
		FrontProxyCAKey:      p("front-proxy-ca.key"),
		FrontProxyClientCert: p("front-proxy-client.crt"),
		FrontProxyClientKey:  p("front-proxy-client.key"),
		ServiceAccountKey:    p("sa.key"),
		ServiceAccountPub:    p("sa.pub"),
		CertapiCACert:        p("certapi-ca.crt"),
		CertapiCAKey:         p("certapi-ca.key"),
		CertapiCert:          p("certapi.crt"),
		CertapiKey:           p("certapi.key"),
	}
}

func (p *PKI) allFiles() []string {
	return []string{
		p.ServerCACert, p.ServerCAKey, p.APIServerCert, p.APIServerKey,
		p.ClientCACert, p.ClientCAKey, p.AdminCert, p.AdminKey, p.KubeletClientCert, p.KubeletClientKey,
		p.FrontProxyCACert, p.FrontProxyCAKey, p.FrontProxyClientCert, p.FrontProxyClientKey,
		p.ServiceAccountKey, p.ServiceAccountPub,
		p.CertapiCACert, p.CertapiCAKey, p.CertapiCert, p.CertapiKey,
	}
}

// ensurePKI returns the PKI in dir, generating it unless every file is already there (a reused
// Dir keeps its kubeconfig and CAs valid across restarts of a local stack).
func ensurePKI(dir string) (*PKI, error) {
	p := newPKIPaths(dir)
	complete := true
	for _, f := range p.allFiles() {
		if _, err := os.Stat(f); err != nil {
			complete = false
			break
		}
	}
	if complete {
		// Check that the leaf certificates are still valid for a while; regenerate otherwise.
		if ok, err := p.leavesValid(time.Hour); err == nil && ok {
			return p, nil
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating PKI dir: %w", err)
	}
	if err := p.generate(); err != nil {
		return nil, fmt.Errorf("generating PKI in %s: %w", dir, err)
	}
	return p, nil
}

func (p *PKI) leavesValid(margin time.Duration) (bool, error) {
	for _, f := range []string{p.APIServerCert, p.AdminCert, p.FrontProxyClientCert, p.CertapiCert} {
		c, err := readCertFile(f)
		if err != nil {
			return false, err
		}
		if time.Now().Add(margin).After(c.NotAfter) {
			return false, nil
		}
	}
	return true, nil
}

const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 365 * 24 * time.Hour
)

func (p *PKI) generate() error {
	serverCA, err := newCA("certapi-framework-server-ca")
	if err != nil {
		return err
	}
	clientCA, err := newCA("certapi-framework-client-ca")
	if err != nil {
		return err
	}
	frontProxyCA, err := newCA("certapi-framework-front-proxy-ca")
	if err != nil {
		return err
	}
	certapiCA, err := newCA("certapi-framework-certapi-serving-ca")
	if err != nil {
		return err
	}
	for _, ca := range []struct {
		kp        *keyPair
		cert, key string
	}{
		{serverCA, p.ServerCACert, p.ServerCAKey},
		{clientCA, p.ClientCACert, p.ClientCAKey},
		{frontProxyCA, p.FrontProxyCACert, p.FrontProxyCAKey},
		{certapiCA, p.CertapiCACert, p.CertapiCAKey},
	} {
		if err := ca.kp.write(ca.cert, ca.key); err != nil {
			return err
		}
	}

	leaves := []struct {
		ca        *keyPair
		tmpl      *x509.Certificate
		cert, key string
	}{
		{serverCA, serverTemplate("kube-apiserver",
			[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
			[]net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)}),
			p.APIServerCert, p.APIServerKey},
		{clientCA, clientTemplate("admin", []string{"system:masters"}), p.AdminCert, p.AdminKey},
		{clientCA, clientTemplate("kube-apiserver-kubelet-client", []string{"system:masters"}), p.KubeletClientCert, p.KubeletClientKey},
		{frontProxyCA, clientTemplate("front-proxy-client", nil), p.FrontProxyClientCert, p.FrontProxyClientKey},
		{certapiCA, serverTemplate("certapi.certapi-system.svc", certapiServiceDNSNames,
			[]net.IP{net.IPv4(127, 0, 0, 1)}), p.CertapiCert, p.CertapiKey},
	}
	for _, l := range leaves {
		kp, err := l.ca.sign(l.tmpl)
		if err != nil {
			return fmt.Errorf("signing %s: %w", l.tmpl.Subject.CommonName, err)
		}
		if err := kp.write(l.cert, l.key); err != nil {
			return err
		}
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generating service account key: %w", err)
	}
	keyPEM, err := encodeKey(saKey)
	if err != nil {
		return err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(saKey.Public())
	if err != nil {
		return fmt.Errorf("marshalling service account public key: %w", err)
	}
	if err := writeFile(p.ServiceAccountKey, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(p.ServiceAccountPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644)
}

// keyPair is a certificate with its private key.
type keyPair struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

func (kp *keyPair) keyPEM() ([]byte, error) { return encodeKey(kp.key) }

func (kp *keyPair) write(certPath, keyPath string) error {
	keyPEM, err := kp.keyPEM()
	if err != nil {
		return err
	}
	if err := writeFile(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFile(certPath, kp.certPEM, 0o644)
}

func newCA(cn string) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		SubjectKeyId:          subjectKeyID(key.Public()),
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA %s: %w", cn, err)
	}
	return keyPairFromDER(der, key)
}

// sign issues a certificate for tmpl with a fresh P-256 key.
func (ca *keyPair) sign(tmpl *x509.Certificate) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.SubjectKeyId = subjectKeyID(key.Public())
	tmpl.AuthorityKeyId = ca.cert.SubjectKeyId
	now := time.Now()
	tmpl.NotBefore = now.Add(-5 * time.Minute)
	tmpl.NotAfter = now.Add(leafValidity)
	if tmpl.NotAfter.After(ca.cert.NotAfter) {
		tmpl.NotAfter = ca.cert.NotAfter
	}
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("creating certificate: %w", err)
	}
	return keyPairFromDER(der, key)
}

func serverTemplate(cn string, dnsNames []string, ips []net.IP) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
}

func clientTemplate(cn string, orgs []string) *x509.Certificate {
	return &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn, Organization: orgs},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
}

func keyPairFromDER(der []byte, key crypto.Signer) (*keyPair, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing generated certificate: %w", err)
	}
	return &keyPair{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
	}, nil
}

func loadKeyPair(certPath, keyPath string) (*keyPair, error) {
	cert, err := readCertFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("reading key: %w", err)
	}
	block, _ := pem.Decode(keyPEM)
	if block == nil {
		return nil, fmt.Errorf("no PEM block in %s", keyPath)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing key %s: %w", keyPath, err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("key in %s is not a signer", keyPath)
	}
	return &keyPair{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		key:     signer,
	}, nil
}

func readCertFile(path string) (*x509.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading certificate: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no CERTIFICATE PEM block in %s", path)
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate %s: %w", path, err)
	}
	return c, nil
}

func encodeKey(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshalling private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func randomSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 127)
	s, err := rand.Int(rand.Reader, limit)
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

func subjectKeyID(pub crypto.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil
	}
	sum := sha1.Sum(der) //nolint:gosec // key identifier, not a security function (RFC 5280 4.2.1.2)
	return sum[:]
}

func writeFile(path string, data []byte, perm os.FileMode) error {
	if err := os.WriteFile(path, data, perm); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
