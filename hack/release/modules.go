package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

// The client modules (docs/usage.md, "Modules") are the go.mod files under pkg/: the API types, the
// generated client, cawatch, the signer and servingcert, which operators require without certapi's
// server. In the repository they require each other through replace directives, which Go ignores in a
// dependency; an operator's build follows their require lines to the tags `pkg/<dir>/vX.Y.Z`. So a
// release's go.mod files must require their siblings at the release's own version (the commit that
// --set-module-versions writes), the tags name each module directory, and the release carries the
// modules as a module proxy serves them, for a consumer to be built against before anything is pushed
// (test/release does).

// rootModule is certapi's main module path; every client module's path is under it.
const rootModule = "github.com/certapi/certapi"

// clientModule is one go.mod under pkg/.
type clientModule struct {
	// dir is the module's directory relative to the repository root, in slash form (pkg/servingcert),
	// which is also its tag prefix.
	dir  string
	path string
}

// findClientModules lists the modules whose go.mod is under pkg/, in lexical order of directory.
func findClientModules() ([]clientModule, error) {
	var mods []clientModule
	err := filepath.WalkDir("pkg", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "go.mod" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		modPath := modfile.ModulePath(data)
		dir := filepath.ToSlash(filepath.Dir(path))
		if modPath != rootModule+"/"+dir {
			return fmt.Errorf("%s: module %q, want %q (a client module's path is its directory under %s)", path, modPath, rootModule+"/"+dir, rootModule)
		}
		mods = append(mods, clientModule{dir: dir, path: modPath})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("finding the client modules under pkg/: %w", err)
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("no go.mod under pkg/: run from the repository root")
	}
	return mods, nil
}

// moduleVersion is the version the modules are published at: the release's version without build
// metadata, which module versions cannot carry.
func moduleVersion(version string) (string, error) {
	v := semver.Canonical(version)
	if v == "" || !strings.HasPrefix(version, v) {
		return "", fmt.Errorf("version %q is not a canonical semantic version (vMAJOR.MINOR.PATCH[-prerelease])", version)
	}
	return v, nil
}

// devVersion matches what hack/version.sh makes of a commit that no tag names exactly: git describe's
// -N-g<hash> or v0.0.0-g<hash>, with -dirty for a changed tree. Such a build is never tagged, so its
// go.mod files need not name it.
var devVersion = regexp.MustCompile(`-g[0-9a-f]{7,}(-dirty)?$`)

// setSiblingVersions rewrites the go.mod data so that every requirement on a certapi module is at
// version; with dropReplaces it also drops the replace directives of certapi modules (the relative paths
// of a checkout, meaningless in a published module). It reports whether anything changed.
func setSiblingVersions(name string, data []byte, version string, dropReplaces bool) ([]byte, bool, error) {
	f, err := modfile.Parse(name, data, nil)
	if err != nil {
		return nil, false, err
	}
	changed := false
	for _, r := range slices.Clone(f.Require) {
		if isCertapiModule(r.Mod.Path) && r.Mod.Version != version {
			if err := f.AddRequire(r.Mod.Path, version); err != nil {
				return nil, false, fmt.Errorf("%s: %w", name, err)
			}
			changed = true
		}
	}
	if dropReplaces {
		for _, r := range slices.Clone(f.Replace) {
			if isCertapiModule(r.Old.Path) {
				if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
					return nil, false, fmt.Errorf("%s: %w", name, err)
				}
				changed = true
			}
		}
	}
	if !changed {
		return data, false, nil
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", name, err)
	}
	return out, true, nil
}

func isCertapiModule(path string) bool {
	return path == rootModule || strings.HasPrefix(path, rootModule+"/")
}

// goModFiles are the go.mod files that require client modules: the root module's, the client modules'
// and those of the outside operators in test/clientmodule.
func goModFiles(mods []clientModule) ([]string, error) {
	files := []string{"go.mod"}
	for _, m := range mods {
		files = append(files, filepath.Join(filepath.FromSlash(m.dir), "go.mod"))
	}
	consumers, err := filepath.Glob(filepath.Join("test", "clientmodule", "*", "go.mod"))
	if err != nil {
		return nil, err
	}
	return append(files, consumers...), nil
}

// setModuleVersions is --set-module-versions: it rewrites every go.mod of the repository so that the
// client modules are required at version, the commit a release of that version is tagged on.
func setModuleVersions(version string) error {
	v, err := moduleVersion(version)
	if err != nil {
		return err
	}
	mods, err := findClientModules()
	if err != nil {
		return err
	}
	files, err := goModFiles(mods)
	if err != nil {
		return err
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		out, changed, err := setSiblingVersions(name, data, v, false)
		if err != nil {
			return err
		}
		if !changed {
			continue
		}
		if err := os.WriteFile(name, out, 0o644); err != nil {
			return err
		}
		fmt.Printf("%s: certapi's modules required at %s\n", name, v)
	}
	return nil
}

// checkModuleVersions refuses a release whose go.mod files do not require the client modules at its
// version: tagged as they are, an operator's `go get` of one would fail on its siblings.
func checkModuleVersions(version string, mods []clientModule) error {
	files, err := goModFiles(mods)
	if err != nil {
		return err
	}
	var wrong []string
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		f, err := modfile.ParseLax(name, data, nil)
		if err != nil {
			return err
		}
		for _, r := range f.Require {
			if isCertapiModule(r.Mod.Path) && r.Mod.Version != version {
				wrong = append(wrong, fmt.Sprintf("%s requires %s %s", name, r.Mod.Path, r.Mod.Version))
			}
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("release %s: the client modules must require each other at %s, the version they are tagged with, but %s; run `make module-versions VERSION=%s`, commit, and release that commit (docs/release.md)",
			version, version, strings.Join(wrong, "; "), version)
	}
	return nil
}

// releaseModules writes the client modules into output/modules as a module proxy serves them
// (<module>/@v/list, <version>.info, .mod and .zip; GOPROXY=file://...) and output/tags.txt, the git
// tags of the release: the version for certapi's module and <dir>/<version> for each client module.
// A development build's modules get their siblings' requirements set to its version in the copy only;
// a release's go.mod files must already say so (checkModuleVersions).
func releaseModules(o options, src source) error {
	v, err := moduleVersion(src.Version)
	if err != nil {
		return err
	}
	mods, err := findClientModules()
	if err != nil {
		return err
	}
	if !devVersion.MatchString(src.Version) {
		if err := checkModuleVersions(v, mods); err != nil {
			return err
		}
	}
	proxy := filepath.Join(o.output, "modules")
	tags := []string{v}
	for _, m := range mods {
		if err := writeProxyModule(proxy, m, v, src); err != nil {
			return fmt.Errorf("module %s: %w", m.path, err)
		}
		tags = append(tags, m.dir+"/"+v)
	}
	return os.WriteFile(filepath.Join(o.output, "tags.txt"), []byte(strings.Join(tags, "\n")+"\n"), 0o644)
}

// writeProxyModule writes module m at version v into the proxy directory: its go.mod with the siblings
// at v and no replace directives, and the zip of its directory (nested modules left out, as `go` does).
func writeProxyModule(proxy string, m clientModule, v string, src source) error {
	escaped, err := module.EscapePath(m.path)
	if err != nil {
		return err
	}
	dir := filepath.Join(proxy, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	srcDir := filepath.FromSlash(m.dir)
	data, err := os.ReadFile(filepath.Join(srcDir, "go.mod"))
	if err != nil {
		return err
	}
	goMod, _, err := setSiblingVersions(m.dir+"/go.mod", data, v, true)
	if err != nil {
		return err
	}
	// The zip is made from a copy whose go.mod is the published one: the module's files as they are,
	// and the go.mod that the .mod file serves (go checks that they agree).
	tmp, err := os.MkdirTemp("", "certapi-module-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	if err := os.CopyFS(tmp, os.DirFS(srcDir)); err != nil {
		return fmt.Errorf("copying %s: %w", srcDir, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), goMod, 0o644); err != nil {
		return err
	}
	zf, err := os.Create(filepath.Join(dir, v+".zip"))
	if err != nil {
		return err
	}
	if err := modzip.CreateFromDir(zf, module.Version{Path: m.path, Version: v}, tmp); err != nil {
		_ = zf.Close()
		return fmt.Errorf("zipping %s: %w", srcDir, err)
	}
	if err := zf.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, v+".mod"), goMod, 0o644); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    string
	}{v, src.Time.UTC().Format("2006-01-02T15:04:05Z")})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, v+".info"), info, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "list"), []byte(v+"\n"), 0o644)
}
