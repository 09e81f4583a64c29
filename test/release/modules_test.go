package release

import (
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// rootModule is certapi's main module; the client modules are the go.mod files under pkg/.
const rootModule = "github.com/certapi/certapi"

// releaseModules are the client modules of the repository, by directory (pkg/servingcert) to module
// path, found as hack/release finds them: every go.mod under pkg/.
func releaseModules(t *testing.T) map[string]string {
	t.Helper()
	mods := map[string]string{}
	err := filepath.WalkDir(filepath.Join(root, "pkg"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "go.mod" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		mods[filepath.ToSlash(rel)] = modfile.ModulePath(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) == 0 {
		t.Fatal("no go.mod under pkg/")
	}
	return mods
}

// TestClientModules: the release carries every client module as a module proxy serves it, at the
// release's version, each go.mod requiring its siblings at that version with no replace directive left,
// each zip holding that same go.mod and none of a nested module's files; tags.txt names the release's
// tag and one <dir>/<version> tag per module.
func TestClientModules(t *testing.T) {
	v := semver.Canonical(version)
	tags := map[string]bool{}
	f, err := os.Open(filepath.Join(dir, "tags.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		tags[sc.Text()] = true
	}
	if !tags[v] {
		t.Errorf("tags.txt lacks the release's own tag %s: %v", v, tags)
	}
	mods := releaseModules(t)
	for d, path := range mods {
		if !tags[d+"/"+v] {
			t.Errorf("tags.txt lacks %s/%s, the tag of module %s", d, v, path)
		}
		escaped, err := module.EscapePath(path)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Join(dir, "modules", filepath.FromSlash(escaped), "@v")
		list, err := os.ReadFile(filepath.Join(base, "list"))
		if err != nil || strings.TrimSpace(string(list)) != v {
			t.Errorf("%s: @v/list %q (%v), want %s", path, list, err, v)
		}
		goMod, err := os.ReadFile(filepath.Join(base, v+".mod"))
		if err != nil {
			t.Fatal(err)
		}
		mf, err := modfile.Parse(path+"@"+v+"/go.mod", goMod, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range mf.Require {
			if strings.HasPrefix(r.Mod.Path, rootModule) && r.Mod.Version != v {
				t.Errorf("%s@%s requires %s %s: an operator's build could not find it", path, v, r.Mod.Path, r.Mod.Version)
			}
		}
		for _, r := range mf.Replace {
			if strings.HasPrefix(r.Old.Path, rootModule) {
				t.Errorf("%s@%s keeps the replace of %s => %s", path, v, r.Old.Path, r.New.Path)
			}
		}
		zr, err := zip.OpenReader(filepath.Join(base, v+".zip"))
		if err != nil {
			t.Fatal(err)
		}
		prefix := path + "@" + v + "/"
		sawGoMod := false
		for _, zf := range zr.File {
			name := strings.TrimPrefix(zf.Name, prefix)
			if name == zf.Name {
				t.Errorf("%s: zip entry %s is not under %s", path, zf.Name, prefix)
				continue
			}
			for nd := range mods {
				if nested, ok := strings.CutPrefix(nd, d+"/"); ok && strings.HasPrefix(name, nested+"/") {
					t.Errorf("%s's zip holds %s, a file of module %s", path, name, mods[nd])
				}
			}
			if name != "go.mod" {
				continue
			}
			sawGoMod = true
			rc, err := zf.Open()
			if err != nil {
				t.Fatal(err)
			}
			zipped, err := io.ReadAll(rc)
			_ = rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(zipped, goMod) {
				t.Errorf("%s: the zip's go.mod differs from %s.mod", path, v)
			}
		}
		_ = zr.Close()
		if !sawGoMod {
			t.Errorf("%s: the zip has no go.mod", path)
		}
	}
}

// TestOperatorBuildsFromTheReleasedModules builds an operator as one outside the repository would: a
// module that requires pkg/servingcert at the release's version with no replace directive, its
// dependencies resolved through the release's modules directory as the first module proxy. It must
// build, and keep the oldest client-go the client modules support (nothing of certapi's server).
func TestOperatorBuildsFromTheReleasedModules(t *testing.T) {
	t.Parallel()
	v := semver.Canonical(version)
	tmp := t.TempDir()
	work := filepath.Join(tmp, "operator")
	if err := os.Mkdir(work, 0o755); err != nil {
		t.Fatal(err)
	}
	goMod := "module example.com/operator\n\ngo 1.25.0\n\nrequire " + rootModule + "/pkg/servingcert " + v + "\n"
	mainGo := `package main

import (
	"fmt"

	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/servingcert"
)

func main() {
	var o servingcert.Options
	var c versioned.Interface
	fmt.Println(o, c)
}
`
	if err := os.WriteFile(filepath.Join(work, "go.mod"), []byte(goMod), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "main.go"), []byte(mainGo), 0o644); err != nil {
		t.Fatal(err)
	}
	// A module cache of its own, so that no module of an earlier release build with the same version
	// (a -dirty tree) is taken from the machine's; it is filled from the machine's cache first, as a proxy,
	// then from the real proxy for what that lacks. certapi's modules are not in the checksum database.
	realCache := strings.TrimSpace(goEnv(t, "GOMODCACHE"))
	proxy := "file://" + filepath.ToSlash(filepath.Join(dir, "modules")) + ",file://" + filepath.ToSlash(filepath.Join(realCache, "cache", "download")) + "," + strings.TrimSpace(goEnv(t, "GOPROXY"))
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod -modcacherw -trimpath", "GOMODCACHE="+filepath.Join(tmp, "modcache"),
		"GOPROXY="+proxy, "GONOSUMDB="+rootModule, "GOTOOLCHAIN=local")
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	run("build", "-o", filepath.Join(work, "operator"), ".")
	all := run("list", "-m", "all")
	for _, want := range []string{rootModule + "/pkg/apis " + v, rootModule + "/pkg/generated " + v, "k8s.io/client-go v0.35."} {
		if !strings.Contains(all, want) {
			t.Errorf("go list -m all lacks %q:\n%s", want, all)
		}
	}
	for _, server := range []string{"k8s.io/apiserver ", "go.etcd.io/etcd/server/v3 ", rootModule + " "} {
		if strings.Contains(all, "\n"+server) {
			t.Errorf("the operator's build list holds %s (certapi's server): \n%s", server, all)
		}
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return string(out)
}
