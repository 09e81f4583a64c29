package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DistrustedFileName is the record of distrusted CAs the leader keeps in the snapshot directory, beside every
// scheduled snapshot, and that `certapi snapshot restore` reads: a restore refuses a snapshot that holds a CA
// listed there. It lives outside etcd on purpose: etcd's own data is what a restore replaces.
const DistrustedFileName = "distrusted-cas.json"

// distrustedKind and distrustedVersion head the record's JSON.
const (
	distrustedKind    = "CertapiDistrustedCAs"
	distrustedVersion = 1
)

// DistrustedCA is one CA certificate that a distrust (spec.distrust) removed from trust. Its private key was
// deleted when the distrust began; a snapshot taken before still holds it.
type DistrustedCA struct {
	// SerialNumber is the CA certificate's serial number in hexadecimal (as CertificateAuthority status shows it).
	SerialNumber string `json:"serialNumber"`
	// SubjectKeyID is the CA certificate's subject key identifier in hexadecimal.
	SubjectKeyID string `json:"subjectKeyID"`
	// SHA256Fingerprint is the SHA-256 of the CA certificate's DER, in hexadecimal; empty when the leader
	// recorded the CA only after it had left the bundle (the serial number and key ID identify it then).
	SHA256Fingerprint string `json:"sha256Fingerprint,omitempty"`
	// Distrust is the spec.distrust value that removed it.
	Distrust string `json:"distrust"`
	// DistrustedAt is when that distrust took effect.
	DistrustedAt time.Time `json:"distrustedAt"`
	// CompletedAt is when the CA left every bundle; zero while the distrust was pending when recorded.
	CompletedAt *time.Time `json:"completedAt,omitempty"`
}

// String names the CA and when it was distrusted, for messages.
func (d DistrustedCA) String() string {
	s := fmt.Sprintf("serial %s (subject key ID %s", d.SerialNumber, d.SubjectKeyID)
	if d.SHA256Fingerprint != "" {
		s += ", SHA-256 " + d.SHA256Fingerprint
	}
	return s + fmt.Sprintf("), distrusted by %q at %s", d.Distrust, d.DistrustedAt.UTC().Format(time.RFC3339))
}

// Same reports whether d and o are the same CA certificate: the same fingerprint when both have one, else the
// same serial number and subject key ID.
func (d DistrustedCA) Same(o DistrustedCA) bool {
	if d.SHA256Fingerprint != "" && o.SHA256Fingerprint != "" {
		return strings.EqualFold(d.SHA256Fingerprint, o.SHA256Fingerprint)
	}
	return strings.EqualFold(d.SerialNumber, o.SerialNumber) && strings.EqualFold(d.SubjectKeyID, o.SubjectKeyID)
}

type distrustedFile struct {
	Kind       string         `json:"kind"`
	Version    int            `json:"version"`
	Distrusted []DistrustedCA `json:"distrusted"`
}

// ReadDistrusted reads a record of distrusted CAs (DistrustedFileName, or an operator's copy of it). A file
// that does not exist is reported with an error that wraps os.ErrNotExist.
func ReadDistrusted(path string) ([]DistrustedCA, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the record of distrusted CAs %s: %w", path, err)
	}
	return ParseDistrusted(path, data)
}

// ParseDistrusted checks that data, read from path (named in errors), is a record of distrusted CAs and
// returns its entries.
func ParseDistrusted(path string, data []byte) ([]DistrustedCA, error) {
	var f distrustedFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("%s is not a record of distrusted CAs (the %s certapi writes): %w", path, DistrustedFileName, err)
	}
	if f.Kind != distrustedKind || f.Version != distrustedVersion {
		return nil, fmt.Errorf("%s is not a record of distrusted CAs: kind %q version %d, want %q version %d (the %s certapi writes)",
			path, f.Kind, f.Version, distrustedKind, distrustedVersion, DistrustedFileName)
	}
	for i, d := range f.Distrusted {
		if d.SerialNumber == "" || d.SubjectKeyID == "" {
			return nil, fmt.Errorf("%s: entry %d names no serialNumber or subjectKeyID", path, i)
		}
	}
	return f.Distrusted, nil
}

// WriteDistrusted writes the record of distrusted CAs to path, mode 0600: to a temporary file beside it,
// synced, then renamed into place and the directory synced, so a reader sees the old record or the new one.
// The directory is created 0700 if missing.
func WriteDistrusted(path string, cas []DistrustedCA) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s for the record of distrusted CAs: %w", dir, err)
	}
	data, err := json.MarshalIndent(distrustedFile{Kind: distrustedKind, Version: distrustedVersion, Distrusted: cas}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the record of distrusted CAs: %w", err)
	}
	return writeFileAtomic(path, append(data, '\n'))
}

// writeFileAtomic writes data to path through a synced temporary file renamed into place (mode 0600).
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".part-*")
	if err != nil {
		return fmt.Errorf("creating a temporary file beside %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil {
		return fmt.Errorf("restricting %s to its owner: %w", tmp.Name(), err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("moving %s into place: %w", path, err)
	}
	done = true
	return syncDir(dir)
}

// DistrustedSources are the places `certapi snapshot restore` reads records of distrusted CAs from: the
// operator's copies (files that must exist), and the snapshot directories that may hold one (the snapshot
// file's own directory and the default <data-dir>/snapshots).
type DistrustedSources struct {
	// Files are records the operator named (--distrusted-cas); each must exist and parse.
	Files []string
	// Dirs may hold DistrustedFileName; a directory without one is passed over.
	Dirs []string
}

// Load reads every record of s and returns the CAs they list (each once) and the files read.
func (s DistrustedSources) Load() ([]DistrustedCA, []string, error) {
	var all []DistrustedCA
	var read []string
	add := func(path string) error {
		cas, err := ReadDistrusted(path)
		if err != nil {
			return err
		}
		read = append(read, path)
		for _, c := range cas {
			if !slices.ContainsFunc(all, c.Same) {
				all = append(all, c)
			}
		}
		return nil
	}
	for _, f := range s.Files {
		if err := add(f); err != nil {
			return nil, nil, fmt.Errorf("--distrusted-cas: %w", err)
		}
	}
	seen := map[string]bool{}
	for _, d := range s.Dirs {
		if d == "" {
			continue
		}
		path := filepath.Join(d, DistrustedFileName)
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		if seen[path] || slices.Contains(read, path) {
			continue
		}
		seen[path] = true
		if err := add(path); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, nil, err
		}
	}
	return all, read, nil
}
