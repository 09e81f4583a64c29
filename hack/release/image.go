package main

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/certapi/certapi/hack/internal/buildsource"
)

// Media types of the SBOM referrer: an OCI artifact manifest whose config is the empty descriptor and
// whose one layer is the SPDX document (OCI image spec 1.1, "Guidelines for artifact usage").
const (
	spdxMediaType  = "application/spdx+json"
	emptyMediaType = "application/vnd.oci.empty.v1+json"
)

// ImageArchive, SBOMArchive and SBOMFile are the names of the image index archive, of the SBOM referrer's
// archive and of the SBOM in the release.
const (
	ImageArchive = "certapi-image.oci.tar"
	SBOMArchive  = "certapi-sbom.oci.tar"
	SBOMFile     = "certapi.spdx.json"
)

// releaseImage builds the image index (hack/image --index-dir) and writes its layout as one archive,
// then the SBOM of the first architecture's certapi as a referrer of the index (its subject) in a layout
// and archive of its own; it returns the index's digest, which the install YAML pins. The referrer is not
// in the image's layout: `ctr images import` (and so `kind load image-archive`) unpacks every manifest
// that index.json lists and fails on an artifact ("mismatched image rootfs and manifest layers"), and
// `crane push --index` would push index.json, artifact included, as the tagged index.
func releaseImage(o options, src source, k *keys) (v1.Hash, error) {
	dir, err := os.MkdirTemp(o.work, "oci-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	binDir := filepath.Join(o.work, "image-bin")
	cmd := exec.Command("go", "run", "./hack/image", "--image", "certapi", "--index-dir", dir, "--arch", o.imageArchs,
		"--bin-dir", binDir, "--tag", imageRepository+":"+src.Version)
	cmd.Env = append(os.Environ(), reproducibleEnv...)
	cmd.Env = append(cmd.Env, "VERSION="+src.Version)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return v1.Hash{}, fmt.Errorf("go run ./hack/image --index-dir: %w", err)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		return v1.Hash{}, err
	}
	ii, err := p.ImageIndex()
	if err != nil {
		return v1.Hash{}, err
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	if len(im.Manifests) != 1 {
		return v1.Hash{}, fmt.Errorf("hack/image wrote %d manifests into the layout, want the one image index", len(im.Manifests))
	}
	index := im.Manifests[0]

	bin := filepath.Join(binDir, strings.Split(o.imageArchs, ",")[0], "certapi")
	sbom, err := spdxDocument(bin, src)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.WriteFile(filepath.Join(o.output, SBOMFile), sbom, 0o644); err != nil {
		return v1.Hash{}, err
	}
	if err := buildsource.TarDir(filepath.Join(o.output, ImageArchive), dir, src.Time); err != nil {
		return v1.Hash{}, err
	}
	sbomDir, err := os.MkdirTemp(o.work, "oci-sbom-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(sbomDir)
	sp, err := layout.Write(sbomDir, empty.Index)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("writing the SBOM's OCI layout: %w", err)
	}
	referrer, err := attachReferrer(sp, index, sbom, src)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("attaching the SBOM: %w", err)
	}
	if err := k.signReferrer(sp, referrer); err != nil {
		return v1.Hash{}, fmt.Errorf("signing the SBOM's referrer: %w", err)
	}
	if err := k.writeImageSignatures(o, src, index, sbom); err != nil {
		return v1.Hash{}, fmt.Errorf("the image's signatures: %w", err)
	}
	if err := buildsource.TarDir(filepath.Join(o.output, SBOMArchive), sbomDir, src.Time); err != nil {
		return v1.Hash{}, err
	}
	return index.Digest, nil
}

// artifactManifest is an OCI image manifest with the fields of an artifact (artifactType, subject), which
// go-containerregistry's v1.Manifest lacks in part.
type artifactManifest struct {
	SchemaVersion int64             `json:"schemaVersion"`
	MediaType     types.MediaType   `json:"mediaType"`
	ArtifactType  string            `json:"artifactType"`
	Config        v1.Descriptor     `json:"config"`
	Layers        []v1.Descriptor   `json:"layers"`
	Subject       *v1.Descriptor    `json:"subject"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// attachReferrer writes the SBOM as an artifact whose subject is the index into the layout p and lists it
// in p's index.json, as `oras attach --oci-layout` does, marked (cosign's "kind" annotation) as the manifest
// that `cosign verify --local-image` checks the signature of; it returns the artifact's descriptor.
func attachReferrer(p layout.Path, subject v1.Descriptor, sbom []byte, src source) (v1.Descriptor, error) {
	blob := func(mt types.MediaType, data []byte) (v1.Descriptor, error) {
		sum := sha256.Sum256(data)
		h := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
		if err := p.WriteBlob(h, io.NopCloser(bytes.NewReader(data))); err != nil {
			return v1.Descriptor{}, err
		}
		return v1.Descriptor{MediaType: mt, Size: int64(len(data)), Digest: h}, nil
	}
	cfg, err := blob(emptyMediaType, []byte("{}"))
	if err != nil {
		return v1.Descriptor{}, err
	}
	cfg.Data = []byte("{}")
	layer, err := blob(spdxMediaType, sbom)
	if err != nil {
		return v1.Descriptor{}, err
	}
	layer.Annotations = map[string]string{"org.opencontainers.image.title": SBOMFile}
	created := src.Time.Format("2006-01-02T15:04:05Z")
	raw, err := json.Marshal(artifactManifest{
		SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: spdxMediaType,
		Config: cfg, Layers: []v1.Descriptor{layer},
		Subject:     &v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest},
		Annotations: map[string]string{"org.opencontainers.image.created": created},
	})
	if err != nil {
		return v1.Descriptor{}, err
	}
	m, err := blob(types.OCIManifestSchema1, raw)
	if err != nil {
		return v1.Descriptor{}, err
	}
	m.ArtifactType = spdxMediaType
	m.Annotations = map[string]string{"org.opencontainers.image.created": created, cosignKindAnno: cosignKindImage}
	return m, p.AppendDescriptor(m)
}

// spdxDocument is an SPDX 2.3 document of the modules linked into bin, from its build information (what
// `go version -m` prints): certapi's own module, every dependency at the version built (a replacement's
// when replaced; certapi's client modules, replaced by their directories, at certapi's version) and the Go
// standard library, each with its package URL.
func spdxDocument(bin string, src source) ([]byte, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("reading the build information of %s: %w", bin, err)
	}
	type ref struct {
		Category string `json:"referenceCategory"`
		Type     string `json:"referenceType"`
		Locator  string `json:"referenceLocator"`
	}
	type pkg struct {
		Name             string `json:"name"`
		SPDXID           string `json:"SPDXID"`
		VersionInfo      string `json:"versionInfo"`
		DownloadLocation string `json:"downloadLocation"`
		FilesAnalyzed    bool   `json:"filesAnalyzed"`
		LicenseConcluded string `json:"licenseConcluded"`
		LicenseDeclared  string `json:"licenseDeclared"`
		CopyrightText    string `json:"copyrightText"`
		ExternalRefs     []ref  `json:"externalRefs"`
	}
	type rel struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	}
	purl := func(path, version string) ref {
		return ref{"PACKAGE-MANAGER", "purl", "pkg:golang/" + path + "@" + version}
	}
	newPkg := func(id, name, version, download, license string, r ref) pkg {
		return pkg{Name: name, SPDXID: id, VersionInfo: version, DownloadLocation: download, LicenseConcluded: license,
			LicenseDeclared: license, CopyrightText: "NOASSERTION", ExternalRefs: []ref{r}}
	}
	mainID := "SPDXRef-Package-certapi"
	pkgs := []pkg{newPkg(mainID, info.Main.Path, src.Version, repoURL, "Apache-2.0", purl(info.Main.Path, src.Version))}
	rels := []rel{{"SPDXRef-DOCUMENT", "DESCRIBES", mainID}}
	goVersion := strings.TrimPrefix(info.GoVersion, "go")
	pkgs = append(pkgs, newPkg("SPDXRef-Package-stdlib", "stdlib", info.GoVersion, "https://go.dev/dl/", "NOASSERTION", purl("stdlib", "v"+goVersion)))
	rels = append(rels, rel{mainID, "DEPENDS_ON", "SPDXRef-Package-stdlib"})
	for i, d := range info.Deps {
		path, version := d.Path, d.Version
		download := ""
		switch {
		case d.Replace != nil && (strings.HasPrefix(d.Replace.Path, "./") || strings.HasPrefix(d.Replace.Path, "../")):
			// A client module of this repository (pkg/apis, pkg/generated, ...), replaced by its directory
			// (version "(devel)"): built from the same commit as certapi, so at certapi's version and from
			// certapi's repository.
			version, download = src.Version, repoURL
		case d.Replace != nil:
			path, version = d.Replace.Path, d.Replace.Version
		}
		if download == "" {
			download = "https://proxy.golang.org/" + path + "/@v/" + version + ".zip"
		}
		id := fmt.Sprintf("SPDXRef-Package-go-module-%d", i+1)
		p := newPkg(id, d.Path, version, download, "NOASSERTION", purl(path, version))
		pkgs = append(pkgs, p)
		rels = append(rels, rel{mainID, "DEPENDS_ON", id})
	}
	sum, err := buildsource.FileSHA256(bin)
	if err != nil {
		return nil, err
	}
	doc := map[string]any{
		"spdxVersion":       "SPDX-2.3",
		"dataLicense":       "CC0-1.0",
		"SPDXID":            "SPDXRef-DOCUMENT",
		"name":              "certapi-" + src.Version,
		"documentNamespace": repoURL + "/spdx/certapi-" + src.Version + "-" + sum,
		"creationInfo": map[string]any{
			"created":  src.Time.Format("2006-01-02T15:04:05Z"),
			"creators": []string{"Tool: certapi hack/release"},
			"comment":  "The Go modules linked into certapi " + src.Version + " (commit " + src.Commit + "), from its build information (go version -m).",
		},
		"packages":      pkgs,
		"relationships": rels,
	}
	return json.MarshalIndent(doc, "", "  ")
}
