package release

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// untar extracts a tar archive into a new directory.
func untar(t *testing.T, path string) string {
	t.Helper()
	out := t.TempDir()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		target := filepath.Join(out, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(target, out+string(os.PathSeparator)) {
			t.Fatalf("%s: entry %q leaves the archive", path, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, data, os.FileMode(h.Mode)); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: %s is neither a file nor a directory", path, h.Name)
		}
	}
}

// ociArchive unpacks the release's OCI layout archive name and returns the layout and its index.json.
func ociArchive(t *testing.T, name string) (layout.Path, *v1.IndexManifest) {
	t.Helper()
	p, err := layout.FromPath(untar(t, filepath.Join(dir, name)))
	if err != nil {
		t.Fatalf("%s is not an OCI image layout: %v", name, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	return p, im
}

// imageLayout unpacks the release's image archive and returns its layout and the image index's
// descriptor, the one manifest its index.json lists (what `ctr images import` and `kind load
// image-archive` unpack, every one of them).
func imageLayout(t *testing.T) (layout.Path, v1.Descriptor) {
	t.Helper()
	p, im := ociArchive(t, "certapi-image.oci.tar")
	var index []v1.Descriptor
	var others []v1.Descriptor
	for _, d := range im.Manifests {
		if d.MediaType.IsIndex() {
			index = append(index, d)
		} else {
			others = append(others, d)
		}
	}
	if len(index) != 1 || len(others) != 0 {
		t.Fatalf("index.json lists %d image indexes and %d other manifests, want the image index alone: %+v", len(index), len(others), im.Manifests)
	}
	if got := index[0].Annotations["org.opencontainers.image.ref.name"]; got != version {
		t.Errorf("the image index's ref.name is %q, want %s", got, version)
	}
	// What `ctr images import` and `kind load image-archive` name the image: the chart's default image.
	if got, want := index[0].Annotations["io.containerd.image.name"], "ghcr.io/certapi/certapi:"+version; got != want {
		t.Errorf("the image index's io.containerd.image.name is %q, want %s (the chart's image.repository and appVersion)", got, want)
	}
	return p, index[0]
}

// certapiFromImage extracts /usr/local/bin/certapi from img's layers.
func certapiFromImage(t *testing.T, img v1.Image) string {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name == "usr/local/bin/certapi" {
				data, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				rc.Close()
				bin := filepath.Join(t.TempDir(), "certapi")
				if err := os.WriteFile(bin, data, 0o755); err != nil {
					t.Fatal(err)
				}
				return bin
			}
		}
		rc.Close()
	}
	t.Fatal("the image holds no usr/local/bin/certapi")
	return ""
}

// commitTime is the time of the commit the release was built from (its revision label), which the
// image's created label and time must be.
func commitTime(t *testing.T, revision string) string {
	t.Helper()
	cmd := exec.Command("git", "log", "-1", "--format=%ct", revision)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git log: %v", err)
	}
	var sec int64
	if _, err := fmt.Sscan(strings.TrimSpace(string(out)), &sec); err != nil {
		t.Fatal(err)
	}
	return time.Unix(sec, 0).UTC().Format(time.RFC3339)
}

func TestImageIndex(t *testing.T) {
	p, indexDesc := imageLayout(t)
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	ii, err := idx.ImageIndex(indexDesc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Errorf("manifest %s has no platform", d.Digest)
			continue
		}
		plat := d.Platform.OS + "/" + d.Platform.Architecture
		platforms = append(platforms, plat)
		img, err := ii.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS+"/"+cf.Architecture != plat {
			t.Errorf("%s's config says %s/%s", plat, cf.OS, cf.Architecture)
		}
		labels := cf.Config.Labels
		revision := labels["org.opencontainers.image.revision"]
		if len(revision) != 40 {
			t.Fatalf("%s: label org.opencontainers.image.revision=%q, want the commit", plat, revision)
		}
		created := commitTime(t, revision)
		for k, want := range map[string]string{
			"org.opencontainers.image.version":  version,
			"org.opencontainers.image.source":   "https://github.com/certapi/certapi",
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.created":  created,
		} {
			if labels[k] != want {
				t.Errorf("%s: label %s=%q, want %q", plat, k, labels[k], want)
			}
		}
		if got := cf.Created.UTC().Format(time.RFC3339); got != created {
			t.Errorf("%s: created %s, want the commit's time %s", plat, got, created)
		}
		bin := certapiFromImage(t, img)
		checkBinaryPlatform(t, bin, "linux", d.Platform.Architecture)
		if d.Platform.Architecture == runtime.GOARCH && runtime.GOOS == "linux" {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			v, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
			cancel()
			if err != nil || !strings.HasPrefix(string(v), "certapi "+version+" (") {
				t.Errorf("certapi --version from the %s image: %v, printed %q; want %q first", plat, err, v, "certapi "+version)
			}
		}
	}
	// The image is built for the linux platforms of the plugins (hack/release's --image-arch default).
	var want []string
	for _, a := range archives(t) {
		if p := a.os + "/" + a.arch; a.os == "linux" && !slices.Contains(want, p) {
			want = append(want, p)
		}
	}
	slices.Sort(platforms)
	slices.Sort(want)
	if !slices.Equal(platforms, want) {
		t.Errorf("the image index holds %v, want %v, the linux platforms of the plugins' archives", platforms, want)
	}
}

// spdx is the part of an SPDX 2.3 document this test reads.
type spdx struct {
	SPDXVersion string `json:"spdxVersion"`
	Packages    []struct {
		Name         string `json:"name"`
		SPDXID       string `json:"SPDXID"`
		VersionInfo  string `json:"versionInfo"`
		ExternalRefs []struct {
			Type    string `json:"referenceType"`
			Locator string `json:"referenceLocator"`
		} `json:"externalRefs"`
	} `json:"packages"`
	Relationships []struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	} `json:"relationships"`
}

// goVersionM runs `go version -m bin`: the Go version, and every dependency's path and version as built
// (the replacement's when replaced; a client module of this repository, replaced by its directory, at
// certapi's release version).
func goVersionM(t *testing.T, bin, release string) (string, map[string]string) {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", bin, err)
	}
	deps := map[string]string{}
	var goVersion, last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case goVersion == "" && len(f) == 2:
			goVersion = f[1]
		case len(f) >= 3 && f[0] == "dep":
			last = f[1]
			deps[last] = f[1] + "@" + f[2]
		case len(f) >= 2 && f[0] == "=>" && (strings.HasPrefix(f[1], "./") || strings.HasPrefix(f[1], "../")):
			deps[last] = last + "@" + release
		case len(f) >= 3 && f[0] == "=>":
			deps[last] = f[1] + "@" + f[2]
		}
	}
	return goVersion, deps
}

func TestSBOM(t *testing.T) {
	imagePath, indexDesc := imageLayout(t)
	p, im := ociArchive(t, "certapi-sbom.oci.tar")
	others := im.Manifests
	var referrers []v1.Descriptor
	for _, d := range others {
		raw, err := p.Bytes(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			ArtifactType string          `json:"artifactType"`
			Subject      *v1.Descriptor  `json:"subject"`
			Layers       []v1.Descriptor `json:"layers"`
		}
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		if m.Subject != nil && m.Subject.Digest == indexDesc.Digest && m.ArtifactType == "application/spdx+json" && len(m.Layers) == 1 {
			referrers = append(referrers, m.Layers[0])
		}
	}
	if len(referrers) != 1 {
		t.Fatalf("certapi-sbom.oci.tar's index.json lists %d SPDX artifacts whose subject is the image index %s, want 1", len(referrers), indexDesc.Digest)
	}
	doc, err := p.Bytes(referrers[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(filepath.Join(dir, "certapi.spdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, file) {
		t.Error("the SBOM attached to the index differs from certapi.spdx.json")
	}
	var s spdx
	if err := json.Unmarshal(doc, &s); err != nil {
		t.Fatalf("the SBOM: %v", err)
	}
	if s.SPDXVersion != "SPDX-2.3" {
		t.Errorf("spdxVersion %q, want SPDX-2.3", s.SPDXVersion)
	}

	// The modules of the amd64 image's certapi, as `go version -m` reads them.
	idx, err := imagePath.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	ii, err := idx.ImageIndex(indexDesc.Digest)
	if err != nil {
		t.Fatal(err)
	}
	img, err := ii.Image(platformDigest(t, ii, "amd64"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion, deps := goVersionM(t, certapiFromImage(t, img), version)
	if len(deps) < 50 {
		t.Fatalf("go version -m lists %d dependencies of certapi; want its modules", len(deps))
	}
	got := map[string]string{}
	var main, stdlib string
	for _, pkg := range s.Packages {
		var purl string
		for _, r := range pkg.ExternalRefs {
			if r.Type == "purl" {
				purl = r.Locator
			}
		}
		switch {
		case pkg.Name == "github.com/certapi/certapi":
			main = pkg.VersionInfo
		case pkg.Name == "stdlib":
			stdlib = pkg.VersionInfo
		default:
			got[pkg.Name] = strings.TrimPrefix(purl, "pkg:golang/")
		}
	}
	if main != version {
		t.Errorf("the SBOM's certapi is %q, want %s", main, version)
	}
	if stdlib != goVersion {
		t.Errorf("the SBOM's stdlib is %q, want %s (go version -m)", stdlib, goVersion)
	}
	for path, want := range deps {
		if got[path] != want {
			t.Errorf("module %s: the SBOM says %q, go version -m %q", path, got[path], want)
		}
	}
	for path := range got {
		if _, ok := deps[path]; !ok {
			t.Errorf("the SBOM lists %s, which go version -m does not", path)
		}
	}
}

func platformDigest(t *testing.T, ii v1.ImageIndex, arch string) v1.Hash {
	t.Helper()
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			return d.Digest
		}
	}
	t.Fatalf("the image index has no linux/%s", arch)
	return v1.Hash{}
}
