package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/certapi/certapi/hack/internal/buildsource"
	pluginmain "github.com/certapi/certapi/pkg/cmd/plugin"
)

// kubectlCompletes are the plugins kubectl completes through a kubectl_complete-<name> executable, with
// how a user types each. kubectl (1.37) completes only top-level plugins, so not `kubectl create
// servingcertrequest`, whose binary completes itself (`kubectl-create-servingcertrequest completion`).
var kubectlCompletes = map[string]string{"kubectl-certapi": "kubectl certapi"}

// completionFiles are the files beside plugin bin in its archive for goos that let kubectl complete it:
// kubectl_complete-certapi, the executable kubectl runs on PATH for `kubectl certapi <TAB>`. None for
// Windows, where a POSIX shell script does not run.
func completionFiles(bin, goos string) []archiveFile {
	command, ok := kubectlCompletes[bin]
	if !ok || goos == "windows" {
		return nil
	}
	return []archiveFile{{pluginmain.KubectlCompletionName(bin), 0o755, pluginmain.KubectlCompletionScript(bin, command)}}
}

// pluginArchive is one plugin's archive for one platform.
type pluginArchive struct {
	plugin   plugin
	platform platform
	// name is the archive's file name in the release; sha256 its checksum.
	name, sha256 string
}

// ArchiveName is the file name of plugin bin's archive for goos/goarch: kubectl-certapi_v0.2.0_linux_amd64.tar.gz,
// .zip for Windows.
func ArchiveName(bin, version, goos, goarch string) string {
	ext := ".tar.gz"
	if goos == "windows" {
		ext = ".zip"
	}
	return bin + "_" + version + "_" + goos + "_" + goarch + ext
}

// releasePlugins links both plugins for each platform and archives each with the LICENSE.
func releasePlugins(o options, src source, platforms []platform) ([]pluginArchive, error) {
	license, err := os.ReadFile("LICENSE")
	if err != nil {
		return nil, err
	}
	var out []pluginArchive
	for _, pl := range platforms {
		dir := filepath.Join(o.work, "plugins", pl.os+"_"+pl.arch)
		var pkgs []string
		for _, p := range plugins {
			pkgs = append(pkgs, p.pkg)
		}
		if err := goBuild(dir, pl.os, pl.arch, src.LDFlags, pkgs...); err != nil {
			return nil, err
		}
		for _, p := range plugins {
			exe := p.bin
			if pl.os == "windows" {
				exe += ".exe"
			}
			data, err := os.ReadFile(filepath.Join(dir, exe))
			if err != nil {
				return nil, err
			}
			files := []archiveFile{{"LICENSE", 0o644, license}, {exe, 0o755, data}}
			files = append(files, completionFiles(p.bin, pl.os)...)
			name := ArchiveName(p.bin, src.Version, pl.os, pl.arch)
			path := filepath.Join(o.output, name)
			if pl.os == "windows" {
				err = writeZip(path, files, src.Time)
			} else {
				err = writeTarGz(path, files, src.Time)
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			sum, err := buildsource.FileSHA256(path)
			if err != nil {
				return nil, err
			}
			out = append(out, pluginArchive{plugin: p, platform: pl, name: name, sha256: sum})
		}
	}
	return out, nil
}

// krewPlugin is krew's plugin manifest (krew.googlecontainertools.github.com/v1alpha2 Plugin), the fields
// certapi's manifests use.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string         `json:"version"`
		Homepage         string         `json:"homepage"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Platforms        []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

type krewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string     `json:"uri"`
	SHA256 string     `json:"sha256"`
	Bin    string     `json:"bin"`
	Files  []krewFile `json:"files"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// KrewDir is where the krew manifests go in the release: krew/NAME.yaml, NAME being the plugin's krew name.
const KrewDir = "krew"

// writeKrewManifests writes one krew manifest per plugin, a platform per archive, each pointing at the
// archive's download URL with its checksum.
func writeKrewManifests(outDir string, src source, archives []pluginArchive) error {
	if err := os.MkdirAll(filepath.Join(outDir, KrewDir), 0o755); err != nil {
		return err
	}
	for _, p := range plugins {
		var m krewPlugin
		m.APIVersion, m.Kind = "krew.googlecontainertools.github.com/v1alpha2", "Plugin"
		m.Metadata.Name = p.krewName
		m.Spec.Version = src.Version
		m.Spec.Homepage = repoURL
		m.Spec.ShortDescription = p.short
		m.Spec.Description = p.description
		for _, a := range archives {
			if a.plugin.bin != p.bin {
				continue
			}
			exe := p.bin
			if a.platform.os == "windows" {
				exe += ".exe"
			}
			var kp krewPlatform
			kp.Selector.MatchLabels = map[string]string{"os": a.platform.os, "arch": a.platform.arch}
			kp.URI = downloadURL + "/" + src.Version + "/" + a.name
			kp.SHA256 = a.sha256
			kp.Bin = exe
			kp.Files = []krewFile{{From: exe, To: "."}, {From: "LICENSE", To: "."}}
			m.Spec.Platforms = append(m.Spec.Platforms, kp)
		}
		data, err := yaml.Marshal(m)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(outDir, KrewDir, p.krewName+".yaml"), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeChecksums writes checksums.txt: the sha256 of every other file of the release, as sha256sum
// prints them (`sha256sum -c checksums.txt` checks them), in lexical order.
func writeChecksums(dir string) error {
	var b strings.Builder
	var walkErr error
	err := filepathWalkFiles(dir, func(rel string, _ int64) {
		if rel == ChecksumsFile || rel == ChecksumsSignature || walkErr != nil {
			return
		}
		sum, err := buildsource.FileSHA256(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			walkErr = err
			return
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, rel)
	})
	if err == nil {
		err = walkErr
	}
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "checksums.txt"), []byte(b.String()), 0o644)
}
