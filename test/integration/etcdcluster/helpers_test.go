package etcdcluster

import (
	"crypto/tls"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// tlsClientConfig is the client side of the members' mutual TLS, from a member's files.
func tlsClientConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	return transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile}.ClientConfig()
}
