package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// writeIndex builds certapi's image for each architecture of o.arch (comma-separated) and writes them as
// one OCI image index, annotated with the version as its ref.name (and --tag as the name containerd
// imports it under), into the empty (or new) OCI image
// layout directory o.indexDir: what make release publishes (hack/release packs and signs off on it). The
// binaries stay in o.binDir/ARCH/certapi. Nothing is cached: a release is built whole.
func writeIndex(o options, src source) error {
	if o.all || o.output != "" || o.image != "certapi" {
		return errors.New("--index-dir writes certapi's image alone: --all, --output and --image name other outputs")
	}
	archs := strings.Split(o.arch, ",")
	j, err := o.jobs(src.Version)
	if err != nil {
		return err
	}
	if j[0].stage, err = readFinalStage(j[0].dockerfile); err != nil {
		return err
	}
	if entries, err := os.ReadDir(o.indexDir); err == nil && len(entries) > 0 {
		return fmt.Errorf("--index-dir %s is not empty", o.indexDir)
	}
	unlock, err := lock(o.binDir)
	if err != nil {
		return err
	}
	defer unlock()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, arch := range archs {
		bins, err := buildBinaries(o.binDir, arch, src, j)
		if err != nil {
			return err
		}
		if err := checkPlatform(bins["certapi"], arch); err != nil {
			return err
		}
		img, err := buildImage(bins["certapi"], arch, j[0].stage, j[0].minimal, src)
		if err != nil {
			return fmt.Errorf("linux/%s: %w", arch, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: arch},
		}})
	}
	p, err := layout.Write(o.indexDir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the OCI layout %s: %w", o.indexDir, err)
	}
	annotations := map[string]string{"org.opencontainers.image.ref.name": src.Version}
	if o.tag != "" {
		// The name `ctr images import` (and so `kind load image-archive`) gives the index: without it a
		// node imports the image under a name no manifest asks for.
		annotations["io.containerd.image.name"] = fullyQualified(o.tag)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(annotations)); err != nil {
		return fmt.Errorf("writing the image index into %s: %w", o.indexDir, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: certapi %s for linux/%s (%s)\n", filepath.Clean(o.indexDir), src.Version, strings.Join(archs, ", linux/"), d)
	return nil
}
