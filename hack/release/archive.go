package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// archiveFile is one file of an archive.
type archiveFile struct {
	name string
	mode int64
	data []byte
}

// writeTarGz writes files, in the order given, as a gzip-compressed tar whose every header has the same
// time, owner root and no user or group name, and whose gzip header has no time or name: the same files
// give the same bytes.
func writeTarGz(out string, files []archiveFile, mtime time.Time) error {
	var buf bytes.Buffer
	gz, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(gz)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: f.mode, Size: int64(len(f.data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// writeZip writes files as a zip with a fixed modification time (Windows' archives).
func writeZip(out string, files []archiveFile, mtime time.Time) error {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: mtime}
		h.SetMode(fs.FileMode(f.mode))
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		if _, err := w.Write(f.data); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// normalizeTarGz rewrites the gzip-compressed tar at path with every entry's time set to mtime and no
// owner names, keeping the order and contents: helm package stamps the files' times from the disk.
func normalizeTarGz(path string, mtime time.Time) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	tr := tar.NewReader(gz)
	var files []archiveFile
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			return fmt.Errorf("%s: %s is not a regular file", path, h.Name)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return err
		}
		files = append(files, archiveFile{h.Name, h.Mode, data})
	}
	return writeTarGz(path, files, mtime)
}
