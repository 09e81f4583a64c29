package testhelpers

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
)

// TestEncryptionConfig loads each generated configuration with k8s.io/apiserver's own loader and
// encrypts a value with it.
func TestEncryptionConfig(t *testing.T) {
	for _, tc := range []struct {
		name   string
		make   func(...string) (string, error)
		prefix string
	}{
		{"aescbc", AESCBCEncryptionConfig, "k8s:enc:aescbc:v1:key1:"},
		{"secretbox", SecretboxEncryptionConfig, "k8s:enc:secretbox:v1:key1:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.make(); err == nil {
				t.Error("a configuration with no resource was made")
			}
			cfg, err := tc.make("certificateauthoritykeys.certapi.dev", "servingcertrequests.certapi.dev")
			if err != nil {
				t.Fatal(err)
			}
			again, err := tc.make("certificateauthoritykeys.certapi.dev", "servingcertrequests.certapi.dev")
			if err != nil {
				t.Fatal(err)
			}
			if cfg == again {
				t.Error("two configurations share their key")
			}
			path := filepath.Join(t.TempDir(), "encryption.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			loaded, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "testhelpers-test")
			if err != nil {
				t.Fatalf("loading:\n%s\n%v", cfg, err)
			}
			for _, gr := range []schema.GroupResource{
				{Group: "certapi.dev", Resource: "certificateauthoritykeys"},
				{Group: "certapi.dev", Resource: "servingcertrequests"},
			} {
				tr, ok := loaded.Transformers[gr]
				if !ok {
					t.Fatalf("no transformer for %s in %v", gr, loaded.Transformers)
				}
				out, err := tr.TransformToStorage(ctx, []byte("secret"), value.DefaultContext(gr.String()))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.HasPrefix(out, []byte(tc.prefix)) {
					t.Errorf("%s: stored value %q does not start with %q", gr, out, tc.prefix)
				}
			}
		})
	}
}
