package release

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/framework"
)

// krewCommand is krew itself, the version whose manifest validation TestKrewManifests runs.
const krewCommand = "sigs.k8s.io/krew/cmd/krew@v0.4.3"

// TestKrewInstallsFromTheRelease installs each plugin with krew itself, from the release's krew manifest and
// this platform's archive (krew checks the archive against the manifest's sha256, as it does after a
// download), the way krew's developer guide tests a manifest before it is published; then kubectl finds
// the installed plugin on PATH and runs it. (krew's uninstall and upgrade need its index, from GitHub.)
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
	kubectl, err := framework.KubectlBinary()
	if err != nil {
		t.Fatal(err)
	}
	krewRoot := filepath.Join(tmp, "krew")
	env := append(os.Environ(), "KREW_ROOT="+krewRoot, "PATH="+filepath.Join(krewRoot, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	run := func(t *testing.T, bin string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	krew := filepath.Join(gobin, "krew")
	for bin, name := range plugins {
		t.Run(name, func(t *testing.T) {
			archive := filepath.Join(dir, fmt.Sprintf("%s_%s_%s_%s.tar.gz", bin, version, runtime.GOOS, runtime.GOARCH))
			out := run(t, krew, "install", "--manifest="+filepath.Join(dir, "krew", name+".yaml"), "--archive="+archive)
			if !strings.Contains(out, "Installed plugin: "+name) {
				t.Errorf("krew install %s: %s; want it installed", name, out)
			}
			// kubectl finds it where krew put it, as a user's kubectl would.
			link := filepath.Join(krewRoot, "bin", "kubectl-"+strings.ReplaceAll(name, "-", "_"))
			if out := run(t, kubectl, "plugin", "list"); !strings.Contains(out, link) {
				t.Errorf("kubectl plugin list does not list krew's %s:\n%s", link, out)
			}
			// krew links a plugin by its name, which holds no space: create-servingcertrequest is
			// `kubectl create-servingcertrequest` (docs/install.md says so, and how to have the other).
			if out := run(t, kubectl, name, "--help"); !strings.Contains(out, "Usage:\n  kubectl") {
				t.Errorf("kubectl %s --help through krew's install: %s; want its usage", name, out)
			}
		})
	}
}
