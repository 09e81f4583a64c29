package main

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// buildBinaries links the Go programs of js, static, into binDir in one go build (which links only what
// changed), and returns every job's binary by name; a job without a package names a binary built by
// hack/build-tools.sh, which must exist.
func buildBinaries(binDir, arch string, src source, js []job) (map[string]string, error) {
	bins := map[string]string{}
	var pkgs []string
	for _, j := range js {
		if j.pkg == "" {
			if _, err := os.Stat(j.binary); err != nil {
				return nil, fmt.Errorf("the %s image needs %s: run `make tools` (hack/build-tools.sh) first: %w", j.name, j.binary, err)
			}
			bins[j.name] = j.binary
			continue
		}
		pkgs = append(pkgs, j.pkg)
		bins[j.name] = filepath.Join(binDir, arch, filepath.Base(j.pkg))
	}
	if len(pkgs) == 0 {
		return bins, nil
	}
	dir := filepath.Join(binDir, arch) + string(os.PathSeparator)
	args := append([]string{"build"}, staticBuildFlags(src)...)
	args = append(args, "-o", dir)
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("building %s for linux/%s: %w", strings.Join(pkgs, " "), arch, err)
	}
	return bins, nil
}

// staticBuildFlags are the flags the images' Go programs are built with, as artifacts/deploy/Dockerfile
// builds certapi (with CGO_ENABLED=0): trimmed paths, no symbol table, the version linked in, into
// pkg/version for certapi and into main.version for the pause program.
func staticBuildFlags(src source) []string {
	return []string{"-trimpath", "-ldflags=-s -w -X main.version=" + src.Version + " " + src.LDFlags}
}

// checkPlatform refuses a binary that is not a static linux/arch executable.
func checkPlatform(bin, arch string) error {
	f, err := elf.Open(bin)
	if err != nil {
		return fmt.Errorf("%s: not a Linux executable: %w", bin, err)
	}
	defer f.Close()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV, "386": elf.EM_386}
	if m, ok := machines[arch]; ok && f.Machine != m {
		return fmt.Errorf("%s is for %v, not %s: build it with GOARCH=%s", bin, f.Machine, arch, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0", bin)
		}
	}
	return nil
}
