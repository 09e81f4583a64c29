package testhelpers

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
)

// TestKMSv2EncryptionConfig loads the generated configuration with k8s.io/apiserver's own loader, with no
// plugin on the socket: the resource gets a transformer and a health check, and writing through it
// fails rather than storing the value in the clear.
func TestKMSv2EncryptionConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, provider, endpoint string
		resources                []string
		ok                       bool
	}{
		{"valid", "hsm", "unix://" + filepath.Join(dir, "kms.sock"), []string{"certificateauthoritykeys.certapi.dev"}, true},
		{"no resource", "hsm", "unix:///kms.sock", nil, false},
		{"not a unix endpoint", "hsm", "tcp://127.0.0.1:1", []string{"certificateauthoritykeys.certapi.dev"}, false},
		{"colon in the name", "h:sm", "unix:///kms.sock", []string{"certificateauthoritykeys.certapi.dev"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := KMSv2EncryptionConfig(tc.provider, tc.endpoint, time.Second, tc.resources...)
			if !tc.ok {
				if err == nil {
					t.Fatalf("made:\n%s", cfg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "encryption.yaml")
			if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			loaded, err := encryptionconfig.LoadEncryptionConfig(ctx, path, false, "testhelpers-test")
			if err != nil {
				t.Fatalf("loading:\n%s\n%v", cfg, err)
			}
			// With KMS v2 providers only, k8s.io/apiserver gathers them into one check.
			if len(loaded.HealthChecks) != 1 || loaded.HealthChecks[0].Name() != "kms-providers" {
				t.Errorf("%d health checks, want one, kms-providers", len(loaded.HealthChecks))
			}
			gr := schema.GroupResource{Group: "certapi.dev", Resource: "certificateauthoritykeys"}
			tr, ok := loaded.Transformers[gr]
			if !ok {
				t.Fatalf("no transformer for %s", gr)
			}
			out, err := tr.TransformToStorage(ctx, []byte("secret"), value.DefaultContext(gr.String()))
			if err == nil {
				t.Fatalf("with no plugin, a write was stored as %q", out)
			}
			if strings.Contains(string(out), "secret") {
				t.Fatalf("with no plugin, the plaintext came back: %q", out)
			}
		})
	}
}
