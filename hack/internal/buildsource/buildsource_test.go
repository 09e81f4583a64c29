package buildsource

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestTarDirIsReproducible: the same tree gives the same bytes whatever its files' times, entries in
// lexical order, each with the given time.
func TestTarDirIsReproducible(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"b/c.json", "a.json", "index.json"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	mtime := time.Unix(1700000000, 0).UTC()
	first, second := filepath.Join(t.TempDir(), "1.tar"), filepath.Join(t.TempDir(), "2.tar")
	if err := TarDir(first, dir, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(dir, "a.json"), time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := TarDir(second, dir, mtime); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if !bytes.Equal(a, b) {
		t.Fatal("two archives of the same tree differ")
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(a))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(mtime) {
			t.Errorf("%s has time %s; want %s", h.Name, h.ModTime, mtime)
		}
		names = append(names, h.Name)
	}
	if want := []string{"a.json", "b/", "b/c.json", "index.json"}; !slices.Equal(names, want) {
		t.Errorf("entries %v; want %v", names, want)
	}
}
