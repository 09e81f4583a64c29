package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// buildImage puts the binary into an empty base with the stage's configuration.
func buildImage(bin, arch string, st stage, minimal bool, src source) (v1.Image, error) {
	layerTar, err := rootfsLayer(bin, st.binary, minimal, src.Time)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("making the layer: %w", err)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: src.Time}, CreatedBy: "hack/image: COPY " + filepath.Base(st.binary) + " /" + st.binary, Comment: "built with go-containerregistry",
	}})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = arch, "linux", v1.Time{Time: src.Time}
	labels := map[string]string{labelVersion: src.Version, labelCreated: src.Time.Format(time.RFC3339)}
	if src.Commit != "" {
		labels[labelRevision] = src.Commit
	}
	for k, v := range st.labels {
		labels[k] = v
	}
	ports := map[string]struct{}{}
	for _, p := range st.ports {
		ports[p] = struct{}{}
	}
	cf.Config = v1.Config{
		User:         st.user,
		Entrypoint:   st.entrypoint,
		ExposedPorts: ports,
		Labels:       labels,
		Env:          []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		WorkingDir:   "/",
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("setting the image configuration: %w", err)
	}
	return img, nil
}

// rootfsLayer is the image's one layer: the binary at dest (mode 0755, owned by root, so the non-root
// user cannot replace it) and the directories above it; unless minimal, also /tmp (1777) and /etc/passwd
// and /etc/group naming root and the user the images run as (65532, "nonroot", as distroless has them).
func rootfsLayer(bin, dest string, minimal bool, mtime time.Time) ([]byte, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{"etc/": true, "tmp/": true}
	if minimal {
		dirs = map[string]bool{}
	}
	for d := filepath.Dir(dest); d != "." && d != "/"; d = filepath.Dir(d) {
		dirs[d+"/"] = true
	}
	for _, d := range slices.Sorted(func(yield func(string) bool) {
		for d := range dirs {
			if !yield(d) {
				return
			}
		}
	}) {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
	}
	type file struct {
		name string
		mode int64
		data []byte
	}
	files := []file{
		{"etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")},
		{"etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")},
		{dest, 0o755, data},
	}
	if minimal {
		files = []file{{dest, 0o755, data}}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
