package testhelpers

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// VerifyServingSecret returns nil when the tls.crt of s, a Secret certapi delivered for Service svc in
// namespace ns, verifies as a serving certificate for svc.ns.svc against bundle (an injected caBundle):
// what a client of the Service that trusts that bundle checks.
func VerifyServingSecret(s *corev1.Secret, bundle []byte, svc, ns string) error {
	block, _ := pem.Decode(s.Data[corev1.TLSCertKey])
	if block == nil {
		return errors.New("tls.crt holds no PEM")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("parsing tls.crt: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		return errors.New("the bundle holds no certificate")
	}
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: svc + "." + ns + ".svc", Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}
