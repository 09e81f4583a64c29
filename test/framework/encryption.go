package framework

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EncryptionConfigFileName is the name, under Dir, of the file Options.EncryptionConfig is written to.
const EncryptionConfigFileName = "encryption-config.yaml"

// AESCBCEncryptionConfig returns an apiserver.config.k8s.io/v1 EncryptionConfiguration, as YAML
// for Options.EncryptionConfig, that encrypts the given resources ("resource.group", e.g.
// "certificateauthoritykeys.certapi.dev") with aescbc under a fresh random 32-byte key named
// "key1", followed by identity so that values stored unencrypted earlier stay readable. Values
// written with it start with "k8s:enc:aescbc:v1:key1:" in etcd.
func AESCBCEncryptionConfig(resources ...string) (string, error) {
	if len(resources) == 0 {
		return "", errors.New("AESCBCEncryptionConfig: at least one resource is required")
	}
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources:\n")
	for _, r := range resources {
		if r == "" || strings.TrimSpace(r) != r {
			return "", fmt.Errorf("AESCBCEncryptionConfig: bad resource name %q", r)
		}
		q, err := json.Marshal(r) // a JSON string is a valid YAML double-quoted scalar
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "  - %s\n", q)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("AESCBCEncryptionConfig: generating a key: %w", err)
	}
	fmt.Fprintf(&b, "  providers:\n  - aescbc:\n      keys:\n      - name: key1\n        secret: %s\n  - identity: {}\n",
		base64.StdEncoding.EncodeToString(key))
	return b.String(), nil
}

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
