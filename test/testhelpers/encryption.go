package testhelpers

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// AESCBCEncryptionConfig returns an apiserver.config.k8s.io/v1 EncryptionConfiguration, as YAML
// for framework.Options.EncryptionConfig, that encrypts the given resources ("resource.group", e.g.
// "certificateauthoritykeys.certapi.dev") with aescbc under a fresh random 32-byte key named
// "key1", followed by identity so that values stored unencrypted earlier stay readable. Values
// written with it start with "k8s:enc:aescbc:v1:key1:" in etcd.
func AESCBCEncryptionConfig(resources ...string) (string, error) {
	return encryptionConfig("aescbc", true, resources)
}

// SecretboxEncryptionConfig returns an EncryptionConfiguration, as YAML, that encrypts the given
// resources with secretbox under a fresh random 32-byte key named "key1", and has no identity provider:
// the sample of artifacts/deploy/README.md (with certificateauthoritykeys.certapi.dev), which
// --require-encrypted-ca-keys accepts. Values written with it start with "k8s:enc:secretbox:v1:key1:".
func SecretboxEncryptionConfig(resources ...string) (string, error) {
	return encryptionConfig("secretbox", false, resources)
}

// encryptionConfig is the EncryptionConfiguration of one provider with a new key, for resources.
func encryptionConfig(provider string, identity bool, resources []string) (string, error) {
	if len(resources) == 0 {
		return "", errors.New("EncryptionConfiguration: at least one resource is required")
	}
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources:\n")
	for _, r := range resources {
		if r == "" || strings.TrimSpace(r) != r {
			return "", fmt.Errorf("EncryptionConfiguration: bad resource name %q", r)
		}
		q, err := json.Marshal(r) // a JSON string is a valid YAML double-quoted scalar
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "  - %s\n", q)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("EncryptionConfiguration: generating a key: %w", err)
	}
	fmt.Fprintf(&b, "  providers:\n  - %s:\n      keys:\n      - name: key1\n        secret: %s\n", provider, base64.StdEncoding.EncodeToString(key))
	if identity {
		b.WriteString("  - identity: {}\n")
	}
	return b.String(), nil
}

// CAKeysEncryptionConfigFile writes SecretboxEncryptionConfig of certapi's CA keys
// (certificateauthoritykeys.certapi.dev), the README's sample, to a file of its own in t's temporary
// directory (mode 0600) and returns the file's path, for --encryption-provider-config or the chart's
// encryption.config.
func CAKeysEncryptionConfigFile(t testing.TB) string {
	t.Helper()
	enc, err := SecretboxEncryptionConfig("certificateauthoritykeys.certapi.dev")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "encryption-config.yaml")
	if err := os.WriteFile(path, []byte(enc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
