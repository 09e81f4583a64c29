// Package release tests what `make release` writes into _output/release (hack/release; make test builds
// one for linux/amd64, make release every platform): every artifact is there and listed
// in checksums.txt with its checksum; each plugin archive unpacks to the LICENSE and a binary for its
// platform, and those of this machine's platform run and report the release's version; the image index
// holds the plugins' linux platforms (linux/amd64 and linux/arm64 in a full release), each config saying its architecture and carrying the release's
// labels; the SBOM attached to the index lists the module versions `go version -m` reads from the
// image's certapi; the krew manifests pass krew's own validation and name the archives by their
// checksums; the chart archive installs on a real kube-apiserver and the install YAML applies there; the
// client modules are there as a module proxy serves them, each requiring its siblings at the release's
// version, and an operator outside the repository builds from them with no replace directive; and a
// second build of the same commit is byte-identical. docs/release.md's blocks that use a release run here
// as written, in a directory laid out as a user downloads it: the offline verification, the chart's and
// the install YAML's install, and krew's install of the plugins; and docs/install.md's crane push of the
// image.
//
// CERTAPI_RELEASE_DIR names another release directory than <repo>/_output/release.
package release

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/certapi/certapi/test/framework"
)

// EnvReleaseDir names the release directory to check instead of <repo>/_output/release.
const EnvReleaseDir = "CERTAPI_RELEASE_DIR"

var (
	root, dir string
	// version is the release's version, read from the name of its linux/amd64 kubectl-certapi archive.
	version string
)

func TestMain(m *testing.M) {
	if err := setup(); err != nil {
		fmt.Fprintf(os.Stderr, "test/release: %v\n", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func setup() error {
	var err error
	if root, err = framework.RepoRoot(); err != nil {
		return err
	}
	dir = os.Getenv(EnvReleaseDir)
	if dir == "" {
		dir = filepath.Join(root, "_output", "release")
	}
	if _, err := os.Stat(filepath.Join(dir, "checksums.txt")); err != nil {
		return fmt.Errorf("no release in %s (run `make release`, or set %s): %w", dir, EnvReleaseDir, err)
	}
	matches, err := filepath.Glob(filepath.Join(dir, "kubectl-certapi_*_linux_amd64.tar.gz"))
	if err != nil {
		return err
	}
	re := regexp.MustCompile(`^kubectl-certapi_(v[^_]+)_linux_amd64\.tar\.gz$`)
	for _, m := range matches {
		if s := re.FindStringSubmatch(filepath.Base(m)); s != nil {
			version = s[1]
		}
	}
	if version == "" {
		return fmt.Errorf("%s has no kubectl-certapi_VERSION_linux_amd64.tar.gz", dir)
	}
	return nil
}

// chartVersion is the chart's version: the release's without the v.
func chartVersion() string { return strings.TrimPrefix(version, "v") }
