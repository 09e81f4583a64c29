package kmspkcs11cmd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/kmsplugin/pkcs11token"
)

// TestServeRefusesBeforeOpening checks the socket and key label combinations serve refuses before it
// loads a module: the module path here does not exist, so reaching Open would fail differently.
func TestServeRefusesBeforeOpening(t *testing.T) {
	cfg := pkcs11token.Config{Module: "/nonexistent/libpkcs11.so", TokenLabel: "t", PIN: "1234"}
	withLabel := cfg
	withLabel.KeyLabel = "kek-1"
	for _, tc := range []struct {
		name           string
		cfg            pkcs11token.Config
		listen, caKeys string
		want           string
	}{
		{"no socket", withLabel, "", "", "nothing to serve"},
		{"KMS without a key label", cfg, "/tmp/kms.sock", "", `give --listen=""`},
		{"both without a key label", cfg, "/tmp/kms.sock", "/tmp/ca.sock", "--key-label is required"},
		{"one socket for both", withLabel, "unix:///tmp/x.sock", "/tmp/x.sock", "each its own socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := serve(context.Background(), tc.cfg, tc.listen, tc.caKeys, time.Second)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("serve: %v; want %q", err, tc.want)
			}
		})
	}
}

// TestFlags checks that --ca-key-socket exists and that --listen can be emptied.
func TestFlags(t *testing.T) {
	cmd := NewCommand(context.Background())
	if err := cmd.ParseFlags([]string{"--listen=", "--ca-key-socket=/run/ca.sock"}); err != nil {
		t.Fatal(err)
	}
	if got := cmd.Flags().Lookup("listen").Value.String(); got != "" {
		t.Errorf("--listen= left %q", got)
	}
	if got := cmd.Flags().Lookup("ca-key-socket").Value.String(); got != "/run/ca.sock" {
		t.Errorf("--ca-key-socket is %q", got)
	}
}
