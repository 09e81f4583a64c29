package release

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/certapi/certapi/pkg/cmd/plugin"
)

// plugins are the kubectl plugins released as archives, with their krew names.
var plugins = map[string]string{"kubectl-certapi": "certapi", "kubectl-create-servingcertrequest": "create-servingcertrequest"}

// required are the platforms every release has archives for: make test builds a release for linux/amd64
// alone (a cross-build of certapi for arm64 costs about 10 minutes of CPU); make release adds linux/arm64,
// darwin and windows, and the image index then holds linux/arm64 too (see TestImage).
var required = []string{"linux/amd64"}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// checksums reads checksums.txt: file name to sha256.
func checksums(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("checksums.txt: line %q is not `SHA256  NAME`", sc.Text())
		}
		out[name] = sum
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// files lists the release's files, relative slash paths.
func files(t *testing.T, d string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(d, func(path string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(d, path)
		out = append(out, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestChecksumsMatch(t *testing.T) {
	sums := checksums(t)
	present := files(t, dir)
	for _, f := range present {
		if f == "checksums.txt" || f == "checksums.txt.sig" {
			// checksums.txt.sig, its signature, is written after it.
			continue
		}
		want, ok := sums[f]
		if !ok {
			t.Errorf("%s is not in checksums.txt", f)
			continue
		}
		if got := sha256File(t, filepath.Join(dir, f)); got != want {
			t.Errorf("%s: sha256 %s, checksums.txt says %s", f, got, want)
		}
	}
	for f := range sums {
		if !slices.Contains(present, f) {
			t.Errorf("checksums.txt lists %s, which the release does not hold", f)
		}
	}
	// Everything a release publishes.
	for _, f := range []string{"certapi-image.oci.tar", "certapi-sbom.oci.tar", "certapi.spdx.json", "certapi.yaml", "certapi-" + chartVersion() + ".tgz", "krew/certapi.yaml", "krew/create-servingcertrequest.yaml",
		"cosign.pub", "certapi-keyring.gpg", "checksums.txt.sig", "provenance.intoto.json", "certapi-image.sig.oci.tar", "certapi-" + chartVersion() + ".tgz.prov"} {
		if !slices.Contains(present, f) {
			t.Errorf("the release has no %s", f)
		}
	}
}

// archive is one plugin archive of the release.
type archive struct {
	bin, os, arch, name string
}

// archives finds every plugin archive, and fails when a required platform has none.
func archives(t *testing.T) []archive {
	t.Helper()
	var out []archive
	for bin := range plugins {
		matches, err := filepath.Glob(filepath.Join(dir, bin+"_"+version+"_*"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range matches {
			name := filepath.Base(m)
			rest := strings.TrimPrefix(name, bin+"_"+version+"_")
			osArch, ext, _ := strings.Cut(rest, ".")
			goos, goarch, ok := strings.Cut(osArch, "_")
			wantExt := "tar.gz"
			if goos == "windows" {
				wantExt = "zip"
			}
			if !ok || ext != wantExt {
				t.Errorf("%s: want %s_%s_OS_ARCH.tar.gz (.zip for windows)", name, bin, version)
				continue
			}
			out = append(out, archive{bin, goos, goarch, name})
		}
		for _, p := range required {
			if !slices.ContainsFunc(out, func(a archive) bool { return a.bin == bin && a.os+"/"+a.arch == p }) {
				t.Errorf("no %s archive for %s", bin, p)
			}
		}
	}
	return out
}

// unpack extracts a tar.gz or zip archive into a new directory and returns it.
func unpack(t *testing.T, path string) string {
	t.Helper()
	out := t.TempDir()
	write := func(name string, mode os.FileMode, r io.Reader) {
		if strings.Contains(name, "..") || strings.HasPrefix(name, "/") || strings.Contains(name, "/") {
			t.Fatalf("%s: entry %q is not a plain file name", path, name)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, name, err)
		}
		if err := os.WriteFile(filepath.Join(out, name), data, mode); err != nil {
			t.Fatal(err)
		}
	}
	if strings.HasSuffix(path, ".zip") {
		zr, err := zip.OpenReader(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		defer zr.Close()
		for _, f := range zr.File {
			rc, err := f.Open()
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			write(f.Name, f.Mode(), rc)
			rc.Close()
		}
		return out
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			t.Fatalf("%s: %s is not a regular file", path, h.Name)
		}
		write(h.Name, os.FileMode(h.Mode), tr)
	}
	return out
}

// checkBinaryPlatform fails unless bin is an executable for goos/goarch.
func checkBinaryPlatform(t *testing.T, bin, goos, goarch string) {
	t.Helper()
	var machine string
	var symbols bool
	switch goos {
	case "linux":
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatalf("%s: not an ELF executable: %v", bin, err)
		}
		defer f.Close()
		machine = map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64"}[f.Machine]
		symbols = f.Section(".symtab") != nil || f.Section(".debug_info") != nil
	case "darwin":
		f, err := macho.Open(bin)
		if err != nil {
			t.Fatalf("%s: not a Mach-O executable: %v", bin, err)
		}
		defer f.Close()
		machine = map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[f.Cpu]
		symbols = f.Section("__debug_info") != nil || f.Section("__zdebug_info") != nil
	case "windows":
		f, err := pe.Open(bin)
		if err != nil {
			t.Fatalf("%s: not a PE executable: %v", bin, err)
		}
		defer f.Close()
		machine = map[uint16]string{pe.IMAGE_FILE_MACHINE_AMD64: "amd64", pe.IMAGE_FILE_MACHINE_ARM64: "arm64"}[f.Machine]
		symbols = len(f.Symbols) > 0 || f.Section(".debug_info") != nil
	}
	if machine != goarch {
		t.Errorf("%s is for %q, want %s/%s", bin, machine, goos, goarch)
	}
	if symbols {
		t.Errorf("%s has a symbol table or DWARF: want it linked with -s -w", bin)
	}
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["GOOS"] != goos || settings["GOARCH"] != goarch || settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("%s was built with %v, want GOOS=%s GOARCH=%s CGO_ENABLED=0 -trimpath", bin, settings, goos, goarch)
	}
	// -trimpath leaves -ldflags out of the build information: look for the stamped version itself.
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(version)) {
		t.Errorf("%s does not hold the version %s: want it stamped (hack/version.sh --ldflags)", bin, version)
	}
}

func TestPluginArchives(t *testing.T) {
	for _, a := range archives(t) {
		t.Run(a.name, func(t *testing.T) {
			out := unpack(t, filepath.Join(dir, a.name))
			exe := a.bin
			if a.os == "windows" {
				exe += ".exe"
			}
			got := files(t, out)
			slices.Sort(got)
			want := []string{"LICENSE", exe}
			completion := plugin.KubectlCompletionName(a.bin)
			if a.bin == "kubectl-certapi" && a.os != "windows" {
				// kubectl's plugin completion: the executable kubectl runs for `kubectl certapi <TAB>`.
				want = append(want, completion)
			}
			if slices.Sort(want); !slices.Equal(got, want) {
				t.Fatalf("%s holds %v, want %v", a.name, got, want)
			}
			if slices.Contains(want, completion) {
				script := filepath.Join(out, completion)
				data, err := os.ReadFile(script)
				if err != nil {
					t.Fatal(err)
				}
				if st, err := os.Stat(script); err != nil || st.Mode().Perm()&0o111 == 0 {
					t.Errorf("%s: %s is not executable (%v)", a.name, completion, err)
				}
				if want := plugin.KubectlCompletionScript(a.bin, "kubectl certapi"); !bytes.Equal(data, want) {
					t.Errorf("%s: %s holds\n%s\nwant\n%s", a.name, completion, data, want)
				}
			}
			bin := filepath.Join(out, exe)
			checkBinaryPlatform(t, bin, a.os, a.arch)
			if a.os != runtime.GOOS || a.arch != runtime.GOARCH {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			v, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
			if err != nil || !strings.HasPrefix(string(v), a.bin+" "+version+" (") {
				t.Errorf("%s --version: %v, printed %q; want %q first", a.bin, err, v, a.bin+" "+version)
			}
		})
	}
}

// krewManifest is the part of krew's plugin manifest this test reads.
type krewManifest struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version   string `json:"version"`
		Platforms []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			URI    string `json:"uri"`
			SHA256 string `json:"sha256"`
			Bin    string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// krewValidator is krew's own manifest validation (the one krew-index runs on every pull request), from
// the Go module proxy; -skip-install leaves out installing from the manifest's URLs, which a release not
// yet published cannot serve.
const krewValidator = "sigs.k8s.io/krew/cmd/validate-krew-manifest@v0.4.3"

func TestKrewManifests(t *testing.T) {
	sums := checksums(t)
	all := archives(t)
	for bin, name := range plugins {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, "krew", name+".yaml")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, "go", "run", krewValidator, "-manifest", path, "-skip-install")
			// krew's module, not certapi's: run outside the work tree, with certapi's GOFLAGS left out.
			cmd.Dir = t.TempDir()
			cmd.Env = append(os.Environ(), "GOFLAGS=-trimpath", "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("krew's validate-krew-manifest %s: %v\n%s", path, err, out)
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var m krewManifest
			if err := yaml.Unmarshal(data, &m); err != nil {
				t.Fatal(err)
			}
			if m.Metadata.Name != name || m.Spec.Version != version {
				t.Errorf("%s: name %q version %q, want %q %q", path, m.Metadata.Name, m.Spec.Version, name, version)
			}
			var listed []string
			for _, p := range m.Spec.Platforms {
				goos, goarch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
				file := p.URI[strings.LastIndex(p.URI, "/")+1:]
				want := archive{bin, goos, goarch, file}
				if !slices.Contains(all, want) {
					t.Errorf("%s: %s/%s names %s, which is not that platform's archive in the release", path, goos, goarch, p.URI)
				}
				if !strings.HasPrefix(p.URI, "https://github.com/certapi/certapi/releases/download/"+version+"/") {
					t.Errorf("%s: uri %s is not of the release %s", path, p.URI, version)
				}
				if p.SHA256 != sums[file] {
					t.Errorf("%s: %s's sha256 %s, checksums.txt says %s", path, file, p.SHA256, sums[file])
				}
				listed = append(listed, file)
			}
			for _, a := range all {
				if a.bin == bin && !slices.Contains(listed, a.name) {
					t.Errorf("%s lists no platform for %s", path, a.name)
				}
			}
		})
	}
}
