package framework

import (
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EncryptionConfigFileName is the name, under Dir, of the file Options.EncryptionConfig is written to.
const EncryptionConfigFileName = "encryption-config.yaml"

// EtcdClient returns a new etcd v3 client of the external etcd (every member), for tests that
// read raw keys (certapi's are under CertapiEtcdPrefix) or revoke leases. The caller must Close
// it. With Options.CertapiEmbeddedEtcd, certapi's own objects are not in this etcd.
func (cp *ControlPlane) EtcdClient() (*clientv3.Client, error) {
	if cp.EtcdEndpoint == "" {
		return nil, errors.New("EtcdClient: etcd was not started")
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   cp.EtcdEndpoints,
		DialTimeout: 10 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("creating etcd client for %v: %w", cp.EtcdEndpoints, err)
	}
	return c, nil
}
