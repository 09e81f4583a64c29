package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParsePlatforms(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []platform
		wantErr string
	}{
		{"linux/amd64,linux/arm64", []platform{{"linux", "amd64"}, {"linux", "arm64"}}, ""},
		{"windows/arm64", []platform{{"windows", "arm64"}}, ""},
		{"linux", nil, `"linux" is not one of`},
		{"freebsd/amd64", nil, `"freebsd/amd64" is not one of`},
		{"linux/386", nil, `"linux/386" is not one of`},
	} {
		got, err := parsePlatforms(tc.in)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("parsePlatforms(%q) = %v, %v; want an error saying %q", tc.in, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || len(got) != len(tc.want)):
			t.Errorf("parsePlatforms(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.wantErr == "":
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("parsePlatforms(%q)[%d] = %v, want %v", tc.in, i, got[i], tc.want[i])
				}
			}
		}
	}
}

func TestImageArchs(t *testing.T) {
	linux, _ := parsePlatforms("linux/amd64,darwin/arm64,linux/arm64,windows/amd64")
	linuxAMD64, _ := parsePlatforms("linux/amd64,darwin/arm64")
	darwin, _ := parsePlatforms("darwin/arm64")
	for _, tc := range []struct {
		flag      string
		platforms []platform
		want      string
		wantErr   string
	}{
		{"", linux, "amd64,arm64", ""},
		{"", linuxAMD64, "amd64", ""},
		{"", darwin, "", "names no linux platform"},
		{"arm64", darwin, "arm64", ""},
		{"amd64, arm64", linuxAMD64, "amd64,arm64", ""},
		{"s390x", linux, "", `"s390x" is not amd64 or arm64`},
		{"amd64,amd64", linux, "", "amd64 is named twice"},
	} {
		got, err := imageArchs(tc.flag, tc.platforms)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("imageArchs(%q, %v) = %q, %v; want an error saying %q", tc.flag, tc.platforms, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("imageArchs(%q, %v) = %q, %v; want %q", tc.flag, tc.platforms, got, err, tc.want)
		}
	}
}

func TestArchiveName(t *testing.T) {
	for _, tc := range []struct{ goos, want string }{
		{"linux", "kubectl-certapi_v0.2.0_linux_arm64.tar.gz"},
		{"darwin", "kubectl-certapi_v0.2.0_darwin_arm64.tar.gz"},
		{"windows", "kubectl-certapi_v0.2.0_windows_arm64.zip"},
	} {
		if got := ArchiveName("kubectl-certapi", "v0.2.0", tc.goos, "arm64"); got != tc.want {
			t.Errorf("ArchiveName(%s) = %s, want %s", tc.goos, got, tc.want)
		}
	}
}

// TestArchivesAreReproducible writes each kind of archive twice and wants the same bytes.
func TestArchivesAreReproducible(t *testing.T) {
	files := []archiveFile{{"LICENSE", 0o644, []byte("license\n")}, {"kubectl-certapi", 0o755, []byte("binary")}}
	mtime := time.Unix(1796195521, 0)
	for _, tc := range []struct {
		name  string
		write func(string) error
	}{
		{"tar.gz", func(p string) error { return writeTarGz(p, files, mtime) }},
		{"zip", func(p string) error { return writeZip(p, files, mtime) }},
	} {
		dir := t.TempDir()
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		if err := tc.write(a); err != nil {
			t.Fatal(err)
		}
		if err := tc.write(b); err != nil {
			t.Fatal(err)
		}
		da, _ := os.ReadFile(a)
		db, _ := os.ReadFile(b)
		if !bytes.Equal(da, db) || len(da) == 0 {
			t.Errorf("%s: two writes of the same files differ", tc.name)
		}
		// And normalizeTarGz leaves a normalized archive as it is.
		if tc.name == "tar.gz" {
			if err := normalizeTarGz(b, mtime); err != nil {
				t.Fatal(err)
			}
			if dn, _ := os.ReadFile(b); !bytes.Equal(da, dn) {
				t.Error("normalizeTarGz changed an archive already normalized")
			}
		}
	}
}

// TestSignaturesAreDeterministic: the same key signs the same message the same way, every signature a
// release makes (the chart's provenance file, checksums.txt's signature), so that two builds of one commit
// with one key are byte-identical (test/release's TestReproducible checks whole releases).
func TestSignaturesAreDeterministic(t *testing.T) {
	dir := t.TempDir()
	when := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	k, err := loadKeys("", "", dir, when)
	if err != nil {
		t.Fatal(err)
	}
	tgz := filepath.Join(dir, "certapi-1.2.3.tgz")
	if err := os.WriteFile(tgz, []byte("not really a chart"), 0o644); err != nil {
		t.Fatal(err)
	}
	var provs [][]byte
	for range 2 {
		if err := k.writeHelmProvenance(tgz, []byte("name: certapi\nversion: 1.2.3\n"), when); err != nil {
			t.Fatal(err)
		}
		p, err := os.ReadFile(tgz + ".prov")
		if err != nil {
			t.Fatal(err)
		}
		provs = append(provs, p)
	}
	if !bytes.Equal(provs[0], provs[1]) {
		t.Errorf("two provenance files of the same chart and key differ:\n%s\n%s", provs[0], provs[1])
	}
	a, errA := k.sign([]byte("checksums"))
	b, errB := k.sign([]byte("checksums"))
	if errA != nil || errB != nil || !bytes.Equal(a, b) {
		t.Errorf("two cosign signatures of the same data differ (%v, %v)", errA, errB)
	}
}
