// Command release builds every artifact of a certapi release into one directory (make release,
// docs/release.md): certapi's image for linux/amd64 and linux/arm64 as one multi-architecture image index
// in an OCI image layout archive, with an SPDX SBOM of certapi's modules attached to the index as an OCI
// referrer; the kubectl plugins kubectl-certapi and kubectl-create-servingcertrequest as archives for
// each platform (tar.gz, zip for Windows); krew plugin manifests naming those archives by checksum; the
// Helm chart packaged with the release's version (and its Helm provenance file); one install YAML of the chart's defaults with the image
// pinned by digest; the client modules under pkg/ as a module proxy serves them, with tags.txt naming
// the release's git tags; and checksums.txt. Everything is signed (sign.go, attest.go): the image index
// and the SBOM's referrer with cosign signatures, the index also with SLSA provenance and SPDX attestations,
// in cosign's layout; the files with a provenance statement; checksums.txt with a cosign signature; the chart
// with a PGP provenance file; by the keys of --cosign-key and --pgp-key, or an ephemeral pair. Every binary is static, stripped (-s -w) and stamped with the
// version of hack/version.sh. Everything is built from the commit alone, with the commit's time as every
// file's, so two builds of one commit are byte-identical (test/release checks it). No Docker: the Go
// toolchain, go-containerregistry (hack/image) and helm.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/certapi/certapi/hack/internal/buildsource"
)

// Where the release is published: the krew manifests' download URLs, the SBOM's and image's source.
const (
	repoURL     = "https://github.com/certapi/certapi"
	downloadURL = repoURL + "/releases/download"
	// imageRepository is the chart's default image.repository, where the image index is pushed.
	imageRepository = "ghcr.io/certapi/certapi"
)

// plugins are the kubectl plugins released as archives, with their krew names.
var plugins = []plugin{
	{bin: "kubectl-certapi", pkg: "./cmd/kubectl-certapi", krewName: "certapi",
		short:       "Inspect and operate certapi's in-cluster CA",
		description: "Shows certapi's CA and injection status (status), checks that certapi serves (check), rotates or distrusts the CA (rotate, distrust), re-issues a ServingCertRequest's Secret now (renew), inspects what a webhook serves or a Secret holds (inspect), and prints the cut-over from cert-manager (migrate). `kubectl certapi completion kubectl-plugin` prints kubectl_complete-certapi, for kubectl's completion of the plugin."},
	{bin: "kubectl-create-servingcertrequest", pkg: "./cmd/kubectl-create-servingcertrequest", krewName: "create-servingcertrequest",
		short:       "Request a TLS serving certificate from certapi",
		description: "Creates a ServingCertRequest for a Service's DNS names, optionally with a Secret certapi delivers the key and certificate into (--secret), and with --wait returns once it is issued; the plugin itself never sees a key. Installed by krew it runs as `kubectl create-servingcertrequest` (krew names the binary kubectl-create_servingcertrequest); from the archive on PATH as `kubectl create servingcertrequest`."},
}

type plugin struct {
	bin, pkg, krewName, short, description string
}

// defaultPlatforms are the plugins' platforms of a full release; make test builds linux/amd64 only.
const defaultPlatforms = "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64,windows/amd64,windows/arm64"

type options struct {
	output, work, platforms, imageArchs, helm string
	// cosignKey and pgpKey are the files of the release's private keys; both empty: an ephemeral pair.
	cosignKey, pgpKey string
	// setModuleVersions, when set, only rewrites the go.mod files for a release of that version.
	setModuleVersions string
}

func main() {
	var o options
	flag.StringVar(&o.output, "output", filepath.Join("_output", "release"), "The directory to write the release into; emptied first.")
	flag.StringVar(&o.work, "work", filepath.Join("_output", "release-build"), "Where the binaries are linked; kept, so that a binary whose inputs did not change is not linked again.")
	flag.StringVar(&o.platforms, "platforms", defaultPlatforms, "OS/ARCH list (comma-separated) of the kubectl plugins' archives.")
	flag.StringVar(&o.imageArchs, "image-arch", "", "The architectures (comma-separated: amd64, arm64) of certapi's image index; all linux. Default: the architectures of --platforms' linux platforms.")
	flag.StringVar(&o.helm, "helm", filepath.Join("_output", "bin", "helm"), "The helm that packages and renders the chart (make tools builds it).")
	flag.StringVar(&o.cosignKey, "cosign-key", os.Getenv(EnvCosignKey), "The release's cosign key: an unencrypted PEM ECDSA P-256 private key (PKCS#8 or SEC 1) that signs the image index, the SBOM's referrer, the attestations and checksums.txt (default $"+EnvCosignKey+"). With --pgp-key; with neither, the release is signed with an ephemeral key pair generated into --work/"+ephemeralKeyDir+" (a development release).")
	flag.StringVar(&o.pgpKey, "pgp-key", os.Getenv(EnvPGPKey), "The release's OpenPGP secret key (armored or binary, unencrypted, EdDSA or RSA) that signs the chart's provenance file for helm verify (default $"+EnvPGPKey+").")
	flag.StringVar(&o.setModuleVersions, "set-module-versions", "", "Build nothing: rewrite every go.mod so that the client modules under pkg/ require each other at this version (vX.Y.Z), the commit to tag a release of it on (make module-versions, docs/release.md).")
	flag.Parse()
	if o.setModuleVersions != "" {
		if err := setModuleVersions(o.setModuleVersions); err != nil {
			fmt.Fprintf(os.Stderr, "release: %v\n", err)
			os.Exit(1)
		}
		return
	}
	start := time.Now()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("release written to %s in %s\n", o.output, time.Since(start).Round(100*time.Millisecond))
}

// source is the version and commit being released, from hack/version.sh.
type source = buildsource.Source

func run(o options) error {
	src, err := buildsource.Read()
	if err != nil {
		return err
	}
	platforms, err := parsePlatforms(o.platforms)
	if err != nil {
		return err
	}
	if o.imageArchs, err = imageArchs(o.imageArchs, platforms); err != nil {
		return err
	}
	if err := os.RemoveAll(o.output); err != nil {
		return err
	}
	if err := os.MkdirAll(o.output, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(o.work, 0o755); err != nil {
		return err
	}
	fmt.Printf("releasing certapi %s (commit %s) into %s\n", src.Version, src.Commit, o.output)
	k, err := loadKeys(o.cosignKey, o.pgpKey, o.work, src.Time)
	if err != nil {
		return fmt.Errorf("the signing keys: %w", err)
	}
	if k.ephemeral {
		fmt.Println(warnEphemeral(o.work))
		defer fmt.Println(warnEphemeral(o.work))
	}

	// First, as the cheapest: a release whose go.mod files do not name its version stops here.
	if err := releaseModules(o, src); err != nil {
		return fmt.Errorf("the client modules: %w", err)
	}
	digest, err := releaseImage(o, src, k)
	if err != nil {
		return fmt.Errorf("the image: %w", err)
	}
	archives, err := releasePlugins(o, src, platforms)
	if err != nil {
		return fmt.Errorf("the kubectl plugins: %w", err)
	}
	if err := writeKrewManifests(o.output, src, archives); err != nil {
		return fmt.Errorf("the krew manifests: %w", err)
	}
	if err := releaseChart(o, src, digest, k); err != nil {
		return fmt.Errorf("the chart: %w", err)
	}
	if err := k.writePublicKeys(o.output); err != nil {
		return fmt.Errorf("the public keys: %w", err)
	}
	if err := k.writeFilesProvenance(o, src); err != nil {
		return fmt.Errorf("%s: %w", ProvenanceFile, err)
	}
	if err := writeChecksums(o.output); err != nil {
		return fmt.Errorf("checksums.txt: %w", err)
	}
	if err := k.signFile(o.output, ChecksumsFile, ChecksumsSignature); err != nil {
		return fmt.Errorf("signing checksums.txt: %w", err)
	}
	return printSizes(o.output)
}

// platform is one OS/ARCH of the plugins.
type platform struct{ os, arch string }

func parsePlatforms(s string) ([]platform, error) {
	var out []platform
	for _, p := range strings.Split(s, ",") {
		osName, arch, ok := strings.Cut(strings.TrimSpace(p), "/")
		if !ok || !slices.Contains([]string{"linux", "darwin", "windows"}, osName) || !slices.Contains([]string{"amd64", "arm64"}, arch) {
			return nil, fmt.Errorf("--platforms: %q is not one of linux, darwin or windows / amd64 or arm64 (e.g. linux/amd64)", p)
		}
		out = append(out, platform{osName, arch})
	}
	return out, nil
}

// imageArchs checks --image-arch, or when it is empty gives the architectures of the linux platforms: the
// image is built for the machines the plugins are, so that a release for linux/amd64 alone (make test's)
// cross-builds nothing.
func imageArchs(flagValue string, platforms []platform) (string, error) {
	var archs []string
	if flagValue == "" {
		for _, p := range platforms {
			if p.os == "linux" && !slices.Contains(archs, p.arch) {
				archs = append(archs, p.arch)
			}
		}
		if len(archs) == 0 {
			return "", errors.New("--platforms names no linux platform: give the image's architectures with --image-arch")
		}
		return strings.Join(archs, ","), nil
	}
	for _, a := range strings.Split(flagValue, ",") {
		a = strings.TrimSpace(a)
		if a != "amd64" && a != "arm64" {
			return "", fmt.Errorf("--image-arch: %q is not amd64 or arm64", a)
		}
		if slices.Contains(archs, a) {
			return "", fmt.Errorf("--image-arch: %s is named twice", a)
		}
		archs = append(archs, a)
	}
	return strings.Join(archs, ","), nil
}

// reproducibleEnv is the build environment of every binary: static, with trimmed paths and no VCS
// stamp (the version is linked in by hack/version.sh's flags instead), whatever GOFLAGS the caller had,
// so that the same commit gives the same bytes.
var reproducibleEnv = []string{"CGO_ENABLED=0", "GOFLAGS=-trimpath -buildvcs=false"}

// goBuild links the static, stripped, version-stamped binaries of pkgs for goos/goarch into dir.
func goBuild(dir, goos, goarch, ldflags string, pkgs ...string) error {
	args := append([]string{"build", "-trimpath", "-ldflags=-s -w " + ldflags, "-o", dir + string(os.PathSeparator)}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), reproducibleEnv...)
	cmd.Env = append(cmd.Env, "GOOS="+goos, "GOARCH="+goarch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s for %s/%s: %w", strings.Join(pkgs, " "), goos, goarch, err)
	}
	return nil
}

// printSizes lists what was written, with sizes (docs/release.md quotes them).
func printSizes(dir string) error {
	return filepathWalkFiles(dir, func(rel string, size int64) {
		fmt.Printf("%12s  %s\n", humanSize(size), rel)
	})
}

// filepathWalkFiles calls f for every regular file under dir, in lexical order, with its slash path
// relative to dir.
func filepathWalkFiles(dir string, f func(rel string, size int64)) error {
	return filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		f(filepath.ToSlash(rel), info.Size())
		return nil
	})
}

// humanSize is size in B, kB or MB (powers of 1000, as ls --si and the docs count).
func humanSize(size int64) string {
	switch {
	case size >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(size)/1e6)
	case size >= 1e3:
		return fmt.Sprintf("%.1f kB", float64(size)/1e3)
	}
	return fmt.Sprintf("%d B", size)
}
