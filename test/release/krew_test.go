package release

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

// krewCommand is krew itself, the version whose manifest validation TestKrewManifests runs.
const krewCommand = "sigs.k8s.io/krew/cmd/krew@v0.4.3"

// TestKrewInstallsFromTheRelease runs docs/release.md's block install-plugins as it is written: krew itself
// (installed as a user has it, ~/.krew/bin on PATH) installs each plugin from the release's krew manifest,
// downloading its archive from the manifest's URL on github.com, which githubReleases answers with the
// release's own file, and checking it against the manifest's sha256, as it will once the release is
// published. Then kubectl finds each installed plugin on PATH and runs it. (krew's uninstall and upgrade
// need its index, from GitHub.)
func TestKrewInstallsFromTheRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	gobin := filepath.Join(tmp, "gobin")
	build := exec.CommandContext(ctx, "go", "install", krewCommand)
	// krew's module, not certapi's: built outside the work tree, with certapi's GOFLAGS left out.
	build.Dir = tmp
	build.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=-trimpath", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go install %s: %v\n%s", krewCommand, err, out)
	}
	// A user's krew: kubectl-krew on PATH, and ~/.krew/bin, where it links the plugins, before it (krew's
	// install guide). krew makes ~/.krew itself (one that holds a bin alone is an old layout to krew).
	home := filepath.Join(tmp, "home")
	krewBin := filepath.Join(home, ".krew", "bin")
	if err := os.Symlink(filepath.Join(gobin, "krew"), filepath.Join(gobin, "kubectl-krew")); err != nil {
		t.Fatal(err)
	}
	// kubectl, without the plugins that _output/bin holds beside it.
	kubectl, err := framework.KubectlBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(kubectl, filepath.Join(gobin, "kubectl")); err != nil {
		t.Fatal(err)
	}
	proxy, caFile := githubReleases(t)
	shell := nodetest.NewDocShell(t, nil)
	shell.Dir = releaseDir(t)
	for name, value := range map[string]string{
		"HOME":          home,
		"PATH":          krewBin + string(os.PathListSeparator) + gobin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HTTPS_PROXY":   proxy,
		"NO_PROXY":      "",
		"SSL_CERT_FILE": caFile,
	} {
		shell.Setenv(name, value)
	}
	out := shell.Run(t, "docs/release.md", 5*time.Minute, "install-plugins")
	for _, name := range plugins {
		t.Run(name, func(t *testing.T) {
			if !strings.Contains(out, "Installed plugin: "+name) {
				t.Errorf("krew install --manifest=krew/%s.yaml: %s; want it installed", name, out)
			}
			// kubectl finds it where krew put it, as a user's kubectl would.
			link := filepath.Join(krewBin, "kubectl-"+strings.ReplaceAll(name, "-", "_"))
			if out := shell.Script(t, "kubectl plugin list", time.Minute, "kubectl plugin list"); !strings.Contains(out, link) {
				t.Errorf("kubectl plugin list does not list krew's %s:\n%s", link, out)
			}
			// krew links a plugin by its name, which holds no space: create-servingcertrequest is
			// `kubectl create-servingcertrequest` (docs/install.md says so, and how to have the other).
			if out := shell.Script(t, "kubectl "+name+" --help", time.Minute, "kubectl "+name+" --help"); !strings.Contains(out, "Usage:\n  kubectl") {
				t.Errorf("kubectl %s --help through krew's install: %s; want its usage", name, out)
			}
		})
	}
}

// githubReleases stands in for the GitHub release that the krew manifests' URLs name
// (https://github.com/certapi/certapi/releases/download/VERSION/FILE) with the release's own files, through
// impersonate: it returns the proxy for HTTPS_PROXY and the CA file for SSL_CERT_FILE.
func githubReleases(t *testing.T) (proxyURL, caFile string) {
	t.Helper()
	prefix := "/certapi/certapi/releases/download/" + version + "/"
	return impersonate(t, "github.com", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := strings.CutPrefix(r.URL.Path, prefix)
		if !ok || name == "" || strings.Contains(name, "/") {
			t.Errorf("a download of %s, which is no file of release %s", r.URL, version)
			http.NotFound(w, r)
			return
		}
		http.ServeFile(w, r, filepath.Join(dir, name))
	}))
}
