package e2e

import (
	"crypto/tls"
)

// tlsKeyPair checks that a PEM key matches a PEM certificate.
func tlsKeyPair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	return tls.X509KeyPair(certPEM, keyPEM)
}
