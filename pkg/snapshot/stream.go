package snapshot

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/certapi/certapi/pkg/snapshot/sha256trailer"
)

// SaveToWriter streams a snapshot through client into w (stdout, for `kubectl exec ... snapshot save -`
// from a container with a read-only root file system and no shell) and checks etcd's SHA-256 trailer on the
// way. w has received every byte by then, so a failed check is reported as an error and the copy must be
// discarded; run Verify on the copy for the full database check. It returns the number of bytes written.
func SaveToWriter(ctx context.Context, client *clientv3.Client, w io.Writer) (int64, error) {
	rc, err := memberSnapshot(ctx, client)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	tw := sha256trailer.NewWriter()
	n, err := io.Copy(io.MultiWriter(w, tw), rc)
	if err != nil {
		return n, fmt.Errorf("streaming the snapshot from etcd: %w", err)
	}
	if err := tw.Check(); err != nil {
		return n, fmt.Errorf("the snapshot streamed from etcd is not complete; discard the copy: %w", err)
	}
	return n, nil
}

// ReadToDir copies r (a snapshot on stdin, for `certapi snapshot restore -`) into a new file in dir,
// created 0700 if missing, and returns its path; the caller removes it.
func ReadToDir(r io.Reader, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("creating %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, ".snapshot-stdin-*")
	if err != nil {
		return "", fmt.Errorf("creating a file in %s for the snapshot on stdin: %w", dir, err)
	}
	path := f.Name()
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		_ = os.Remove(path)
		return "", fmt.Errorf("reading the snapshot from stdin: %w", err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return filepath.Clean(path), nil
}
