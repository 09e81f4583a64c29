// Package image tests `make image` and `make images` (hack/image): it builds the image archives as the
// Makefile does, reads them back both as OCI image layouts and as docker-archives, checks their
// configuration (certapi's against artifacts/deploy/Dockerfile), unpacks their root file systems and runs
// each binary from its own.
package image

import (
	"archive/tar"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/certapi/certapi/test/framework"
)

func TestImage(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	archive := filepath.Join(dir, "certapi-image.tar")
	build := exec.Command("go", "run", "./hack/image", "--output", archive, "--tag", "example.com/certapi:test")
	build.Dir = root
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("go run ./hack/image: %v\n%s", err, out)
	}
	t.Logf("%s", out)

	// The OCI image layout side (oci-layout, index.json): docker load since 25, podman load, containerd.
	layoutDir := filepath.Join(dir, "layout")
	untar(t, archive, layoutDir)
	idx, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		t.Fatalf("reading the archive as an OCI image layout: %v", err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json %+v, want one image", im.Manifests)
	}
	if a := im.Manifests[0].Annotations; a["io.containerd.image.name"] != "example.com/certapi:test" || a["org.opencontainers.image.ref.name"] != "test" {
		t.Errorf("index.json annotations %v", a)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Image(img); err != nil {
		t.Fatalf("the image does not validate: %v", err)
	}
	if mt, _ := img.MediaType(); mt != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want OCI's", mt)
	}

	// The docker-archive side (manifest.json), over the same blobs: docker load of any version, crane push.
	legacy, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatalf("reading the archive as a docker-archive: %v", err)
	}
	if err := validate.Image(legacy); err != nil {
		t.Fatalf("the docker-archive image does not validate: %v", err)
	}
	if a, b := digests(t, img), digests(t, legacy); !slices.Equal(a, b) {
		t.Fatalf("the two sides differ: config and layers %v and %v", a, b)
	}

	// Its configuration is the Dockerfile's.
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (not root)", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/certapi"}) || len(c.Cmd) != 0 {
		t.Errorf("entrypoint %q cmd %q", c.Entrypoint, c.Cmd)
	}
	if _, ok := c.ExposedPorts["8443/tcp"]; !ok || len(c.ExposedPorts) != 1 {
		t.Errorf("exposed ports %v, want 8443/tcp", c.ExposedPorts)
	}
	if c.Labels["org.opencontainers.image.title"] != "certapi" || !strings.Contains(c.Labels["org.opencontainers.image.description"], "aggregated API server") ||
		c.Labels["org.opencontainers.image.version"] == "" {
		t.Errorf("labels %v", c.Labels)
	}
	dockerfile, err := os.ReadFile(filepath.Join(root, "artifacts", "deploy", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"USER " + c.User, "ENTRYPOINT [\"" + c.Entrypoint[0] + "\"]", "EXPOSE 8443", `org.opencontainers.image.title="certapi"`} {
		if !strings.Contains(string(dockerfile), want) {
			t.Errorf("the Dockerfile lacks %q, which the image has", want)
		}
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want one on an empty base", len(layers), err)
	}

	// The root file system: the binary, root-owned, static; certapi --version runs from it.
	rootfs := filepath.Join(dir, "rootfs")
	extract := mutate.Extract(img)
	defer extract.Close()
	modes := untarReader(t, extract, rootfs)
	want := map[string]int64{"etc": 0o755, "etc/group": 0o644, "etc/passwd": 0o644, "tmp": 0o1777, "usr": 0o755, "usr/local": 0o755,
		"usr/local/bin": 0o755, "usr/local/bin/certapi": 0o755}
	if !maps.Equal(modes, want) {
		t.Errorf("root file system (name: mode) %v, want exactly %v", modes, want)
	}
	bin := filepath.Join(rootfs, "usr", "local", "bin", "certapi")
	checkStatic(t, bin)
	version, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("certapi --version from the image: %v\n%s", err, version)
	}
	if v := string(version); !strings.HasPrefix(v, "certapi "+c.Labels["org.opencontainers.image.version"]+" ") || !strings.Contains(v, "linux/"+runtime.GOARCH) {
		t.Errorf("certapi --version printed %q, want the image's version label %q", v, c.Labels["org.opencontainers.image.version"])
	}
}

// digests are the digests of img's config and layers.
func digests(t *testing.T, img v1.Image) []string {
	t.Helper()
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	out := []string{cfg.String()}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d.String())
	}
	return out
}

// untar unpacks the tar file path into dir.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	untarReader(t, f, dir)
}

// untarReader unpacks directories and regular files of r into dir, with their permissions, and returns
// their modes by name. Anything else, or a name that leaves dir, fails the test.
func untarReader(t *testing.T, r io.Reader, dir string) map[string]int64 {
	t.Helper()
	names := map[string]int64{}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names[strings.TrimSuffix(hdr.Name, "/")] = hdr.Mode
		target := filepath.Join(dir, hdr.Name)
		if !strings.HasPrefix(target, filepath.Clean(dir)+string(os.PathSeparator)) {
			t.Fatalf("%q leaves the directory", hdr.Name)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if hdr.Uid != 0 || hdr.Gid != 0 {
				t.Errorf("%s is owned by %d:%d, want root", hdr.Name, hdr.Uid, hdr.Gid)
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode).Perm())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.Copy(out, tr); err != nil {
				t.Fatal(err)
			}
			out.Close()
		default:
			t.Fatalf("%s: unexpected tar entry type %c", hdr.Name, hdr.Typeflag)
		}
	}
}
