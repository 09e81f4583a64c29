package testhelpers

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// KMSv2EncryptionConfig returns an apiserver.config.k8s.io/v1 EncryptionConfiguration, as YAML for
// framework.Options.EncryptionConfig, that encrypts the given resources with the KMS v2 plugin serving on
// endpoint ("unix:///path/to/socket") under the provider name name, each call to the plugin bounded by
// timeout. It has no identity provider: with the plugin down nothing is written in the clear. Values
// written with it start with "k8s:enc:kms:v2:<name>:" in etcd.
func KMSv2EncryptionConfig(name, endpoint string, timeout time.Duration, resources ...string) (string, error) {
	if len(resources) == 0 {
		return "", errors.New("EncryptionConfiguration: at least one resource is required")
	}
	if name == "" || strings.ContainsAny(name, ":\n") || !strings.HasPrefix(endpoint, "unix://") {
		return "", fmt.Errorf("EncryptionConfiguration: bad KMS provider name %q or endpoint %q", name, endpoint)
	}
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources:\n")
	for _, r := range resources {
		if r == "" || strings.TrimSpace(r) != r {
			return "", fmt.Errorf("EncryptionConfiguration: bad resource name %q", r)
		}
		fmt.Fprintf(&b, "  - %s\n", quote(r))
	}
	fmt.Fprintf(&b, "  providers:\n  - kms:\n      apiVersion: v2\n      name: %s\n      endpoint: %s\n      timeout: %s\n",
		quote(name), quote(endpoint), timeout)
	return b.String(), nil
}

// quote is s as a YAML double-quoted scalar (a JSON string is one).
func quote(s string) string {
	q, _ := json.Marshal(s) // a string always marshals
	return string(q)
}
