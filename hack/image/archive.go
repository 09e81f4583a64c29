package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/certapi/certapi/hack/internal/buildsource"
)

// writeArchive writes img as an OCI image layout into dir, then tars dir with a docker-archive
// manifest.json into out.
func writeArchive(out, dir string, img v1.Image, tag string, mtime time.Time) error {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	refName := tag
	if _, t, ok := strings.Cut(lastPathElement(tag), ":"); ok {
		refName = t
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": refName,
		"io.containerd.image.name":          fullyQualified(tag),
	})); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	entry := struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{Config: "blobs/sha256/" + cfg.Hex, RepoTags: []string{tag}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		entry.Layers = append(entry.Layers, "blobs/sha256/"+d.Hex)
	}
	manifest, err := json.Marshal([]any{entry})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o644); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	// Written beside out and renamed over it: a reader (ctr images import) sees the old archive or the
	// new one, never half of one.
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	f.Close()
	if err := buildsource.TarDir(tmp, dir, mtime); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, out)
}

func lastPathElement(ref string) string {
	return ref[strings.LastIndex(ref, "/")+1:]
}

// fullyQualified is the name containerd (and so docker load of an OCI archive) expects: certapi:dev is
// docker.io/library/certapi:dev.
func fullyQualified(ref string) string {
	first, _, hasSlash := strings.Cut(ref, "/")
	switch {
	case !hasSlash:
		return "docker.io/library/" + ref
	case !strings.ContainsAny(first, ".:") && first != "localhost":
		return "docker.io/" + ref
	}
	return ref
}
