package release

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/node/nodetest"
)

// cosignBin checks that cosign, built from the Go module proxy by hack/build-tools.sh cosign (module
// hack/tools/cosign), is in _output/bin, where the docs' shell finds it on PATH.
func cosignBin(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, "_output", "bin", "cosign")); err != nil {
		t.Fatalf("no cosign (run hack/build-tools.sh cosign, or make tools): %v", err)
	}
}

// offlineEnv makes any network use by cosign or helm fail: a proxy that refuses every connection, and a TUF
// root of the test's own, so that a verification that passes passed offline.
func offlineEnv(t *testing.T) []string {
	home := t.TempDir()
	return []string{"HTTPS_PROXY=http://127.0.0.1:1", "HTTP_PROXY=http://127.0.0.1:1", "NO_PROXY=", "TUF_ROOT=" + filepath.Join(home, "tuf"),
		"HOME=" + home, "HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
}

// verifyPage is docs/release.md's offline verification block and the shell it runs in: a user's, with
// cosign and helm of _output/bin on PATH and no network.
type verifyPage struct {
	shell *nodetest.DocShell
	block string
}

func newVerifyPage(t *testing.T) *verifyPage {
	t.Helper()
	cosignBin(t)
	shell := nodetest.NewDocShell(t, nil)
	for _, kv := range offlineEnv(t) {
		name, value, _ := strings.Cut(kv, "=")
		shell.Setenv(name, value)
	}
	return &verifyPage{shell: shell, block: nodetest.Block(t, "docs/release.md", "verify-release")}
}

// line is the one command of the block that holds every one of parts, as the page writes it.
func (p *verifyPage) line(t *testing.T, parts ...string) string {
	t.Helper()
	var found []string
	for _, l := range strings.Split(p.block, "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		ok := true
		for _, part := range parts {
			ok = ok && strings.Contains(l, part)
		}
		if ok {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("docs/release.md's verify-release block has %d commands holding %q, want one:\n%s", len(found), parts, p.block)
	}
	return found[0]
}

// run runs commands (the page's) in d, a release directory as a user downloaded it, and returns their
// output and whether they succeeded.
func (p *verifyPage) run(d string, commands ...string) (string, bool) {
	p.shell.Dir = d
	out, err := p.shell.ScriptErr(3*time.Minute, strings.Join(commands, "\n"))
	return out, err == nil
}

// mustRun runs commands that must succeed, such as the page's unpacking of a layout before a flip.
func (p *verifyPage) mustRun(t *testing.T, d string, commands ...string) {
	t.Helper()
	if out, ok := p.run(d, commands...); !ok {
		t.Fatalf("%s:\n%s", strings.Join(commands, "\n"), out)
	}
}

// releaseDir is a new directory laid out as a user downloads the release: every file of the release, the
// public keys among them (the test release's are the project's), each a link to the release's; own makes
// one of them a copy of its own, for the test to flip a byte of.
func releaseDir(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Symlink(filepath.Join(dir, e.Name()), filepath.Join(out, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// own replaces the link d/name with a copy of the release's file, and returns its path.
func own(t *testing.T, d, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("the release has no %s: %v", name, err)
	}
	p := filepath.Join(d, name)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// flip changes one byte of path: the last byte of the first occurrence of within (so that JSON and
// base64 stay well-formed and only the signature can object), or the middle byte when within is empty.
func flip(t *testing.T, path, within string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := len(data) / 2
	if within != "" {
		j := bytes.Index(data, []byte(within))
		if j < 0 {
			t.Fatalf("%s has no %q to flip a byte of", path, within)
		}
		i = j + len(within) - 1
	}
	switch c := data[i]; {
	case c >= 'a' && c < 'z', c >= 'A' && c < 'Z', c >= '0' && c < '9':
		data[i] = c + 1
	case c == 'z' || c == 'Z' || c == '9':
		data[i] = c - 1
	default:
		data[i] ^= 0x01
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// blobPath is the path of digest's blob in an OCI layout directory.
func blobPath(layoutDir, digest string) string {
	return filepath.Join(layoutDir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

// TestSignaturesVerify runs docs/release.md's offline verification block as it is written, with cosign and
// helm, in a directory laid out as a user downloads the release, with no network: the checksums, the image
// index's cosign signature and its SLSA provenance and SPDX attestations (cosign verify /
// verify-attestation --local-image), the SBOM referrer's signature, the files' provenance (cosign
// verify-blob-attestation) and the chart's provenance file (helm verify). Then, in a fresh copy each time,
// it flips one byte of each artifact and of each signature and checks that the page's command for it fails.
func TestSignaturesVerify(t *testing.T) {
	t.Parallel()
	page := newVerifyPage(t)
	_, indexDesc := imageLayout(t)
	tgz := "certapi-" + chartVersion() + ".tgz"

	t.Run("the page's block", func(t *testing.T) {
		page.shell.Dir = releaseDir(t)
		out := page.shell.Run(t, "docs/release.md", 5*time.Minute, "verify-release")
		if !strings.Contains(out, `"docker-manifest-digest":"`+indexDesc.Digest.String()+`"`) {
			t.Errorf("cosign verify did not verify the image index %s:\n%s", indexDesc.Digest, out)
		}
		if n := strings.Count(out, `"payloadType":"application/vnd.in-toto+json"`); n < 2 {
			t.Errorf("cosign verify-attestation printed %d in-toto attestations, want the provenance's and the SBOM's:\n%s", n, out)
		}
		if !strings.Contains(out, "Chart Hash Verified") && !strings.Contains(out, "Signed by") {
			t.Errorf("helm verify did not say it verified %s:\n%s", tgz, out)
		}
	})
	// The page's commands, each run on a copy with one byte flipped.
	unpackImage := page.line(t, "tar -xf certapi-image.oci.tar")
	unpackSBOM := page.line(t, "tar -xf certapi-sbom.oci.tar")
	verifyImage := page.line(t, "cosign verify ", "--local-image image")
	verifyProvenance := page.line(t, "cosign verify-attestation", "slsaprovenance1", "--local-image image")
	verifySBOMReferrer := page.line(t, "cosign verify ", "--local-image sbom")
	verifyChecksums := page.line(t, "cosign verify-blob ", "checksums.txt")
	verifyFile := page.line(t, "cosign verify-blob-attestation", "certapi.spdx.json")
	verifyChart := page.line(t, "helm verify")
	fails := func(t *testing.T, d, what, command string) {
		t.Helper()
		if out, ok := page.run(d, command); ok {
			t.Errorf("%s passed %s:\n%s", command, what, out)
		}
	}

	t.Run("image index", func(t *testing.T) {
		// A flipped byte of the index: its digest is no longer the signed one.
		d := releaseDir(t)
		page.mustRun(t, d, unpackImage)
		flip(t, blobPath(filepath.Join(d, "image"), indexDesc.Digest.String()), `"linux`)
		fails(t, d, "an image index with a flipped byte", verifyImage)
		fails(t, d, "an image index with a flipped byte", verifyProvenance)
	})

	t.Run("signature and attestations of the index", func(t *testing.T) {
		// Flip a byte of the signed payload (cosign's simple-signing layer) and of the provenance (the DSSE
		// envelope's payload): each blob, located by its media type in the signatures' layout.
		for _, c := range []struct{ kind, mediaType, within, command string }{
			{"dev.cosignproject.cosign/sigs", "application/vnd.dev.cosign.simplesigning.v1+json", `"docker-reference":"ghcr`, verifyImage},
			{"dev.cosignproject.cosign/atts", "application/vnd.dsse.envelope.v1+json", `"payload":"eyJ`, verifyProvenance},
		} {
			d := releaseDir(t)
			page.mustRun(t, d, unpackImage)
			l := filepath.Join(d, "image")
			flip(t, blobPath(l, layerOfKind(t, l, c.kind, c.mediaType)), c.within)
			fails(t, d, "a flipped byte of "+c.mediaType, c.command)
		}
	})

	t.Run("SBOM", func(t *testing.T) {
		d := releaseDir(t)
		page.mustRun(t, d, unpackSBOM)
		l := filepath.Join(d, "sbom")
		flip(t, blobPath(l, manifestOfKind(t, l, "dev.cosignproject.cosign/image")), `"application/spdx`)
		fails(t, d, "the SBOM's referrer with a flipped byte", verifySBOMReferrer)
		d = releaseDir(t)
		flip(t, own(t, d, "certapi.spdx.json"), `"SPDX-2`)
		fails(t, d, "certapi.spdx.json with a flipped byte", verifyFile)
	})

	t.Run("checksums.txt", func(t *testing.T) {
		d := releaseDir(t)
		flip(t, own(t, d, "checksums.txt"), "")
		fails(t, d, "checksums.txt with a flipped byte", verifyChecksums)
	})

	t.Run("files' provenance", func(t *testing.T) {
		// The page's command for certapi.spdx.json, for the other files the provenance names.
		forFile := func(name string) string { return strings.Replace(verifyFile, " certapi.spdx.json", " "+name, 1) }
		d := releaseDir(t)
		for _, f := range []string{tgz, "certapi.yaml", "checksums.txt"} {
			out, ok := page.run(d, forFile(f))
			if f == "checksums.txt" {
				// checksums.txt is written after the provenance, and signed on its own.
				if ok {
					t.Errorf("the provenance lists checksums.txt: %s", out)
				}
				continue
			}
			if !ok {
				t.Fatalf("%s: %s", forFile(f), out)
			}
		}
		flip(t, own(t, d, "provenance.intoto.json"), `"payload":"eyJ`)
		fails(t, d, "a provenance with a flipped byte", forFile("certapi.yaml"))
		d = releaseDir(t)
		flip(t, own(t, d, "certapi.yaml"), "kind: Namespace")
		fails(t, d, "certapi.yaml with a flipped byte", forFile("certapi.yaml"))
	})

	t.Run("chart", func(t *testing.T) {
		d := releaseDir(t)
		flip(t, own(t, d, tgz), "")
		fails(t, d, "a chart with a flipped byte", verifyChart)
		d = releaseDir(t)
		flip(t, own(t, d, tgz+".prov"), "files:\n  certapi")
		fails(t, d, "a provenance file with a flipped byte", verifyChart)
	})
}

// manifestOfKind is the digest of the manifest that layoutDir's index.json marks with cosign's kind.
func manifestOfKind(t *testing.T, layoutDir, kind string) string {
	t.Helper()
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	raw, err := os.ReadFile(filepath.Join(layoutDir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	for _, m := range index.Manifests {
		if m.Annotations["kind"] == kind {
			return m.Digest
		}
	}
	t.Fatalf("%s/index.json lists no manifest of kind %s: %s", layoutDir, kind, raw)
	return ""
}

// layerOfKind is the digest of the first layer of mediaType in the manifest of cosign's kind.
func layerOfKind(t *testing.T, layoutDir, kind, mediaType string) string {
	t.Helper()
	raw, err := os.ReadFile(blobPath(layoutDir, manifestOfKind(t, layoutDir, kind)))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		if l.MediaType == mediaType {
			return l.Digest
		}
	}
	t.Fatalf("the %s manifest has no %s layer", kind, mediaType)
	return ""
}
