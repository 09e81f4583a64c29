package etcdcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// EpochFileName is the file in a member's etcd data directory that names the cluster epoch its data
// belongs to. The epoch counts restores: `certapi snapshot restore --cluster-epoch N` writes N into the
// restored directory, and every member started with --etcd-cluster-epoch N moves aside data of an
// earlier epoch instead of restarting on it, so that members that still hold the data of before the
// restore cannot restart the old cluster beside the restored one (two of three are a quorum). A data
// directory without the file is of epoch 0, as every cluster before its first restore.
const EpochFileName = "certapi-cluster-epoch"

// ReadEpoch returns the cluster epoch of the etcd data directory etcdDir: 0 when it names none.
func ReadEpoch(etcdDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(etcdDir, EpochFileName))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading the cluster epoch of %s: %w", etcdDir, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s holds %q, not a cluster epoch (a whole number from 0): restore the file or move the data aside",
			filepath.Join(etcdDir, EpochFileName), strings.TrimSpace(string(b)))
	}
	return n, nil
}

// WriteEpoch records epoch in the etcd data directory etcdDir, through a synced temporary file renamed
// into place.
func WriteEpoch(etcdDir string, epoch int) error {
	path := filepath.Join(etcdDir, EpochFileName)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("recording the cluster epoch in %s: %w", etcdDir, err)
	}
	_, err = fmt.Fprintf(f, "%d\n", epoch)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("recording the cluster epoch in %s: %w", etcdDir, err)
	}
	return nil
}
