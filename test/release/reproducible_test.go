package release

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestReproducible builds the release again from the same commit, for the same platforms, into a
// directory of its own (linking every binary again), with the first build's signing keys (those of
// $CERTAPI_COSIGN_KEY and $CERTAPI_PGP_KEY, or the ephemeral pair it generated), and compares every file byte
// for byte: signatures included, which are deterministic (RFC 6979 ECDSA, Ed25519 or RSA PGP, fixed times).
func TestReproducible(t *testing.T) {
	t.Parallel()
	var platforms []string
	for _, a := range archives(t) {
		if p := a.os + "/" + a.arch; !slices.Contains(platforms, p) {
			platforms = append(platforms, p)
		}
	}
	slices.Sort(platforms)
	tmp := t.TempDir()
	out := filepath.Join(tmp, "release")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/release", "--output", out, "--work", filepath.Join(tmp, "work"), "--platforms", strings.Join(platforms, ","))
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "VERSION="+version, "CGO_ENABLED=0")
	if os.Getenv("CERTAPI_COSIGN_KEY") == "" {
		keys := filepath.Join(root, "_output", "release-build", "ephemeral-keys")
		cmd.Env = append(cmd.Env, "CERTAPI_COSIGN_KEY="+filepath.Join(keys, "cosign.key"), "CERTAPI_PGP_KEY="+filepath.Join(keys, "pgp.key"))
	}
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./hack/release: %v\n%s", err, b)
	}
	first, second := files(t, dir), files(t, out)
	if !slices.Equal(first, second) {
		t.Fatalf("the second build wrote %v, the first %v", second, first)
	}
	for _, f := range first {
		a, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two builds of the same commit (%s: is the work tree the one the release was built from?)", f, version)
		}
	}
}
