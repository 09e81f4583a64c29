package release

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
)

// cosignBin is cosign built from the Go module proxy by hack/build-tools.sh cosign (module hack/tools/cosign).
func cosignBin(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(root, "_output", "bin", "cosign")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no cosign (run hack/build-tools.sh cosign, or make tools): %v", err)
	}
	return bin
}

// offlineEnv makes any network use by cosign or helm fail: a proxy that refuses every connection, and a TUF
// root of the test's own, so that a verification that passes passed offline.
func offlineEnv(t *testing.T) []string {
	home := t.TempDir()
	return []string{"HTTPS_PROXY=http://127.0.0.1:1", "HTTP_PROXY=http://127.0.0.1:1", "NO_PROXY=", "TUF_ROOT=" + filepath.Join(home, "tuf"),
		"HOME=" + home, "HELM_CACHE_HOME=" + home, "HELM_CONFIG_HOME=" + home, "HELM_DATA_HOME=" + home}
}

// verify runs a verification command and returns its output and whether it succeeded.
func verify(t *testing.T, bin string, args ...string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), offlineEnv(t)...)
	out, err := cmd.CombinedOutput()
	return string(out), err == nil
}

// releaseCopy copies the release's verification inputs into a new directory, where a test may flip bytes.
func releaseCopy(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	for _, f := range []string{"cosign.pub", "certapi-keyring.gpg", "checksums.txt", "checksums.txt.sig", "provenance.intoto.json",
		"certapi.spdx.json", "certapi.yaml", "certapi-" + chartVersion() + ".tgz", "certapi-" + chartVersion() + ".tgz.prov"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatalf("the release has no %s: %v", f, err)
		}
		if err := os.WriteFile(filepath.Join(out, f), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// signedImageLayout unpacks the image's archive and the signatures' archive over it into one OCI layout,
// as docs/release.md does before `cosign verify --local-image`.
func signedImageLayout(t *testing.T) string {
	t.Helper()
	out := t.TempDir()
	for _, a := range []string{"certapi-image.oci.tar", "certapi-image.sig.oci.tar"} {
		cmd := exec.Command("tar", "-xf", filepath.Join(dir, a), "-C", out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar -xf %s: %v\n%s", a, err, b)
		}
	}
	return out
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

// TestSignaturesVerify verifies every signed artifact of the release with the ecosystem's tools, offline
// and with the release's public keys alone, as docs/release.md tells a user to: the image index's cosign
// signature and its SLSA provenance and SPDX attestations (cosign verify / verify-attestation
// --local-image), the SBOM referrer's signature, checksums.txt's (cosign verify-blob), the files'
// provenance (cosign verify-blob-attestation) and the chart's provenance file (helm verify). Then it flips
// one byte of each artifact and of each signature and checks that the same command fails.
func TestSignaturesVerify(t *testing.T) {
	t.Parallel()
	cosign := cosignBin(t)
	helm, err := framework.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	_, indexDesc := imageLayout(t)
	tgz := "certapi-" + chartVersion() + ".tgz"
	key := func(d string) string { return filepath.Join(d, "cosign.pub") }
	offline := []string{"--insecure-ignore-tlog=true", "--offline=true"}

	verifyImage := func(layoutDir string) (string, bool) {
		return verify(t, cosign, append([]string{"verify", "--key", key(dir), "--local-image", layoutDir}, offline...)...)
	}
	verifyAttestation := func(layoutDir, typ string) (string, bool) {
		return verify(t, cosign, append([]string{"verify-attestation", "--key", key(dir), "--type", typ, "--local-image", layoutDir}, offline...)...)
	}
	verifyChecksums := func(d string) (string, bool) {
		return verify(t, cosign, append([]string{"verify-blob", "--key", key(d), "--signature", filepath.Join(d, "checksums.txt.sig"), filepath.Join(d, "checksums.txt")}, offline...)...)
	}
	verifyFile := func(d, name string) (string, bool) {
		return verify(t, cosign, append([]string{"verify-blob-attestation", "--key", key(d), "--type", "slsaprovenance1", "--signature", filepath.Join(d, "provenance.intoto.json"), filepath.Join(d, name)}, offline...)...)
	}
	verifyChart := func(d string) (string, bool) {
		return verify(t, helm, "verify", "--keyring", filepath.Join(d, "certapi-keyring.gpg"), filepath.Join(d, tgz))
	}

	t.Run("image index", func(t *testing.T) {
		l := signedImageLayout(t)
		out, ok := verifyImage(l)
		if !ok {
			t.Fatalf("cosign verify --local-image: %s", out)
		}
		if !strings.Contains(out, `"docker-manifest-digest":"`+indexDesc.Digest.String()+`"`) {
			t.Errorf("cosign verify did not verify the image index %s:\n%s", indexDesc.Digest, out)
		}
		for _, typ := range []string{"slsaprovenance1", "spdxjson"} {
			out, ok := verifyAttestation(l, typ)
			if !ok {
				t.Fatalf("cosign verify-attestation --type %s: %s", typ, out)
			}
			if !strings.Contains(out, `"payloadType":"application/vnd.in-toto+json"`) {
				t.Errorf("cosign verify-attestation --type %s printed no in-toto attestation:\n%s", typ, out)
			}
		}
		// A flipped byte of the index: its digest is no longer the signed one.
		l = signedImageLayout(t)
		flip(t, blobPath(l, indexDesc.Digest.String()), `"linux`)
		if out, ok := verifyImage(l); ok {
			t.Errorf("cosign verify passed an image index with a flipped byte:\n%s", out)
		}
		if out, ok := verifyAttestation(l, "slsaprovenance1"); ok {
			t.Errorf("cosign verify-attestation passed an image index with a flipped byte:\n%s", out)
		}
	})

	t.Run("signature and attestations of the index", func(t *testing.T) {
		// Flip a byte of the signed payload (cosign's simple-signing layer) and of the provenance (the DSSE
		// envelope's payload): each blob, located by its media type in the signatures' layout.
		for _, c := range []struct{ kind, mediaType, within string }{
			{"dev.cosignproject.cosign/sigs", "application/vnd.dev.cosign.simplesigning.v1+json", `"docker-reference":"ghcr`},
			{"dev.cosignproject.cosign/atts", "application/vnd.dsse.envelope.v1+json", `"payload":"eyJ`},
		} {
			l := signedImageLayout(t)
			layer := layerOfKind(t, l, c.kind, c.mediaType)
			flip(t, blobPath(l, layer), c.within)
			if c.kind == "dev.cosignproject.cosign/sigs" {
				if out, ok := verifyImage(l); ok {
					t.Errorf("cosign verify passed a flipped byte of the signature's payload:\n%s", out)
				}
				continue
			}
			if out, ok := verifyAttestation(l, "slsaprovenance1"); ok {
				t.Errorf("cosign verify-attestation passed a flipped byte of the provenance:\n%s", out)
			}
		}
	})

	t.Run("SBOM", func(t *testing.T) {
		l := untar(t, filepath.Join(dir, "certapi-sbom.oci.tar"))
		if out, ok := verifyImage(l); !ok {
			t.Fatalf("cosign verify --local-image of the SBOM's referrer: %s", out)
		}
		d := releaseCopy(t)
		if out, ok := verifyFile(d, "certapi.spdx.json"); !ok {
			t.Fatalf("cosign verify-blob-attestation certapi.spdx.json: %s", out)
		}
		referrer := manifestOfKind(t, l, "dev.cosignproject.cosign/image")
		flip(t, blobPath(l, referrer), `"application/spdx`)
		if out, ok := verifyImage(l); ok {
			t.Errorf("cosign verify passed the SBOM's referrer with a flipped byte:\n%s", out)
		}
		flip(t, filepath.Join(d, "certapi.spdx.json"), `"SPDX-2`)
		if out, ok := verifyFile(d, "certapi.spdx.json"); ok {
			t.Errorf("cosign verify-blob-attestation passed certapi.spdx.json with a flipped byte:\n%s", out)
		}
	})

	t.Run("checksums.txt", func(t *testing.T) {
		d := releaseCopy(t)
		if out, ok := verifyChecksums(d); !ok {
			t.Fatalf("cosign verify-blob checksums.txt: %s", out)
		}
		flip(t, filepath.Join(d, "checksums.txt"), "")
		if out, ok := verifyChecksums(d); ok {
			t.Errorf("cosign verify-blob passed checksums.txt with a flipped byte:\n%s", out)
		}
	})

	t.Run("files' provenance", func(t *testing.T) {
		d := releaseCopy(t)
		for _, f := range []string{tgz, "certapi.yaml", "checksums.txt"} {
			out, ok := verifyFile(d, f)
			if f == "checksums.txt" {
				// checksums.txt is written after the provenance, and signed on its own.
				if ok {
					t.Errorf("the provenance lists checksums.txt: %s", out)
				}
				continue
			}
			if !ok {
				t.Fatalf("cosign verify-blob-attestation %s: %s", f, out)
			}
		}
		flip(t, filepath.Join(d, "provenance.intoto.json"), `"payload":"eyJ`)
		if out, ok := verifyFile(d, "certapi.yaml"); ok {
			t.Errorf("cosign verify-blob-attestation passed a provenance with a flipped byte:\n%s", out)
		}
		d = releaseCopy(t)
		flip(t, filepath.Join(d, "certapi.yaml"), "kind: Namespace")
		if out, ok := verifyFile(d, "certapi.yaml"); ok {
			t.Errorf("cosign verify-blob-attestation passed certapi.yaml with a flipped byte:\n%s", out)
		}
	})

	t.Run("chart", func(t *testing.T) {
		d := releaseCopy(t)
		if out, ok := verifyChart(d); !ok {
			t.Fatalf("helm verify: %s", out)
		}
		flip(t, filepath.Join(d, tgz), "")
		if out, ok := verifyChart(d); ok {
			t.Errorf("helm verify passed a chart with a flipped byte:\n%s", out)
		}
		d = releaseCopy(t)
		flip(t, filepath.Join(d, tgz+".prov"), "files:\n  certapi")
		if out, ok := verifyChart(d); ok {
			t.Errorf("helm verify passed a provenance file with a flipped byte:\n%s", out)
		}
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
