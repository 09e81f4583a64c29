package framework

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// BuildTestImage builds a test-only image: the Go package pkg of this repository (e.g.
// "./test/framework/testdata/probe") as a static binary, /<base name of pkg>, the image's entrypoint, in an
// empty base, written as a docker-archive tar to out under the name ref, for ClusterNode.ImportImage or
// Options.NodeImages. The images users run come from `make images`, not from here.
func BuildTestImage(ctx context.Context, pkg, ref, out string) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "test-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	binName := filepath.Base(pkg)
	bin := filepath.Join(work, binName)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
	}
	return BuildBinaryImage(bin, "/"+binName, ref, out)
}

// BuildBinaryImage packs the binary bin as the file at path (e.g. "/usr/local/bin/etcd") of a test-only
// image, its entrypoint, in an empty base, user 65532, written as a docker-archive tar to out under the
// name ref. A dynamically linked bin gets the shared libraries `ldd` names (the machine's C library) at the
// same paths, so that a binary of `make tools` built with cgo runs as it is. extra are more files of the
// machine (absolute paths), packed at the same paths with the libraries they load: a PKCS#11 module that
// bin opens at run time, which ldd of bin cannot name.
func BuildBinaryImage(bin, path, ref, out string, extra ...string) error {
	work, err := os.MkdirTemp("", "test-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	files := map[string]string{path: bin}
	for _, f := range append([]string{bin}, extra...) {
		if f != bin {
			files[f] = f
		}
		libs, err := sharedLibraries(f)
		if err != nil {
			return err
		}
		for _, l := range libs {
			files[l] = l
		}
	}
	var layerTar bytes.Buffer
	tw := tar.NewWriter(&layerTar)
	for _, in := range slices.Sorted(maps.Keys(files)) {
		data, err := os.ReadFile(files[in]) // through symlinks: the image holds the files themselves
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: strings.TrimPrefix(in, "/"), Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layerFile := filepath.Join(work, "layer.tar")
	if err := os.WriteFile(layerFile, layerTar.Bytes(), 0o644); err != nil {
		return err
	}
	layer, err := tarball.LayerFromFile(layerFile)
	if err != nil {
		return fmt.Errorf("making the layer of %s: %w", ref, err)
	}
	cf, err := empty.Image.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: []string{path}, User: "65532:65532"}
	img, err := mutate.ConfigFile(empty.Image, cf)
	if err != nil {
		return err
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return fmt.Errorf("adding the layer of %s: %w", ref, err)
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image name %q: %w", ref, err)
	}
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

// sharedLibraries returns the absolute paths of the shared libraries bin loads, from `ldd`; none for a
// static binary.
func sharedLibraries(bin string) ([]string, error) {
	out, err := exec.Command("ldd", bin).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, out)
	}
	var libs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for i, w := range f {
			// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and "/lib64/ld-linux-x86-64.so.2 (0x...)"
			if strings.HasPrefix(w, "/") && (i == 0 || f[i-1] == "=>") {
				libs = append(libs, w)
			}
		}
	}
	return libs, nil
}

func imagesDir() (string, error) {
	if d := os.Getenv(EnvImagesDir); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "_output", "images"), nil
}

// ImageArchive returns the path of the image archive name (e.g. "certapi.tar") that `make images`
// writes to <repo>/_output/images (or $IMAGES_DIR), with an error saying how to make it when missing.
func ImageArchive(name string) (string, error) {
	d, err := imagesDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(d, name)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("image archive %s: %w (run `make images`)", p, err)
	}
	return p, nil
}
