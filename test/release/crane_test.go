package release

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/certapi/certapi/test/node/nodetest"
)

// craneCommand is crane, from go-containerregistry at the version certapi's go.mod requires (hack/release
// builds the image with it), so building it costs only crane's own packages.
const craneCommand = "github.com/google/go-containerregistry/cmd/crane"

// TestCranePushesTheImage runs docs/install.md's block image-push as it is written: the image's OCI layout
// unpacked from the release and pushed with crane to registry.example.com, which an in-process registry
// (go-containerregistry's pkg/registry) answers through impersonate. The registry then serves the image
// index under the block's tag with the digest of the release's index, the one certapi.yaml pins.
func TestCranePushesTheImage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "crane"), craneCommand)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", craneCommand, err, out)
	}
	_, indexDesc := imageLayout(t)

	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	proxy, caFile := impersonate(t, "registry.example.com", reg)
	// Where the block runs: a directory whose _output/release is the release under test.
	shell := nodetest.NewDocShell(t, nil)
	shell.Dir = t.TempDir()
	if err := os.MkdirAll(filepath.Join(shell.Dir, "_output"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, filepath.Join(shell.Dir, "_output", "release")); err != nil {
		t.Fatal(err)
	}
	for name, value := range map[string]string{
		"HOME":          t.TempDir(), // no docker config: the registry asks for no credentials
		"PATH":          bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HTTPS_PROXY":   proxy,
		"NO_PROXY":      "",
		"SSL_CERT_FILE": caFile,
	} {
		shell.Setenv(name, value)
	}
	out := shell.Run(t, "docs/install.md", 5*time.Minute, "image-push")
	if want := "registry.example.com/certapi@" + indexDesc.Digest.String(); !strings.Contains(out, want) {
		t.Errorf("crane push printed no %s (the release's image index):\n%s", want, out)
	}

	// What the registry serves under the tag: the release's index, by its digest, from the registry itself.
	srv := httptest.NewServer(reg)
	defer srv.Close()
	got := shell.Script(t, "crane digest", time.Minute, "crane digest --insecure "+strings.TrimPrefix(srv.URL, "http://")+"/certapi:v0.2.0")
	if strings.TrimSpace(got) != indexDesc.Digest.String() {
		t.Errorf("the registry serves certapi:v0.2.0 as %s, want the release's image index %s", strings.TrimSpace(got), indexDesc.Digest)
	}
}
