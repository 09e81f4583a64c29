// Package buildsource is what hack/image and hack/release know of the commit they build: its version
// stamp from hack/version.sh (the one source of certapi's version), and archives made reproducible by
// that commit's time, so that two builds of one commit are byte-identical.
package buildsource

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Source is the commit being built.
type Source struct {
	// Version is git describe's (or $VERSION), a semantic version; Commit the full commit hash.
	Version, Commit string
	// Time is the commit's time: the image's creation time and every archived file's.
	Time time.Time
	// LDFlags stamp the version into pkg/version (hack/version.sh --ldflags).
	LDFlags string
}

// Read runs hack/version.sh from the repository root (the working directory).
func Read() (Source, error) {
	run := func(args ...string) (string, error) {
		cmd := exec.Command(filepath.Join("hack", "version.sh"), args...)
		cmd.Stderr = os.Stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("hack/version.sh %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	kv, err := run()
	if err != nil {
		return Source{}, err
	}
	vars := map[string]string{}
	for _, l := range strings.Split(kv, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			vars[k] = v
		}
	}
	epoch, err := strconv.ParseInt(vars["SOURCE_DATE_EPOCH"], 10, 64)
	if err != nil {
		return Source{}, fmt.Errorf("hack/version.sh: SOURCE_DATE_EPOCH=%q: %w", vars["SOURCE_DATE_EPOCH"], err)
	}
	s := Source{Version: vars["VERSION"], Commit: vars["GIT_COMMIT"], Time: time.Unix(epoch, 0).UTC()}
	if s.LDFlags, err = run("--ldflags"); err != nil {
		return Source{}, err
	}
	return s, nil
}

// TarDir writes the files under dir into the tar file out, in lexical order, with mtime as every
// entry's time and fixed modes and owners.
func TarDir(out, dir string, mtime time.Time) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Mode: 0o644, Format: tar.FormatPAX}
		if d.IsDir() {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, hdr.Name+"/", 0o755
			return tw.WriteHeader(hdr)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

// FileSHA256 is the sha256 of a file's content, in hex: what hack/image keys its cache on and what
// hack/release writes into checksums.txt and the krew manifests.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
