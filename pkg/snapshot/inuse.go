package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
)

// lockedBy returns a file of the etcd data directory etcdDir that a running etcd holds locked, "" when no
// file is locked (etcdDir absent, not a directory, or holding no file a running etcd locks), or an error
// when that cannot be told: Restore then refuses rather than move the data of a running etcd aside.
//
// etcd locks its own files for as long as it uses them: bbolt takes flock(LOCK_EX) on member/snap/db when
// etcd opens its backend, and etcd's WAL takes fileutil's lock (an open file description lock, F_OFD_SETLK,
// on Linux) on every WAL file it may still write, the newest always. Both are held by the process that has
// the directory open, however it listens: the single embedded member on its Unix socket, a member of
// certapi's etcd cluster on TCP, an etcd someone started by hand; and both go away with the process, even
// one that was killed. So an attempt at each lock that does not wait is the check that a directory is in
// use, where probing addresses is not: a cluster member's recorded client URL (127.0.0.1:2379) may be
// another etcd's on the same host, and an address that does not answer says nothing about the files.
//
// Each attempt is released at once. The db's is a shared flock, so a reader such as `etcdutl snapshot
// status` is not disturbed. The WAL's is etcd's own call (fileutil.TryLockFile, which picks OFD locks or
// flock as etcd does on the same kernel): lock families do not see each other on Linux, so a lock of
// another kind would not conflict with etcd's. Nothing is read or written.
func lockedBy(etcdDir string) (string, error) {
	if fi, err := os.Stat(etcdDir); err != nil || !fi.IsDir() {
		return "", nil // no etcd data to hold; Restore's target checks say what else is there
	}
	db := filepath.Join(etcdDir, "member", "snap", "db")
	locked, err := dbLocked(db)
	if err != nil {
		return "", fmt.Errorf("checking whether an etcd has %s open: %w", db, err)
	}
	if locked {
		return db, nil
	}
	wals, err := filepath.Glob(filepath.Join(etcdDir, "member", "wal", "*.wal"))
	if err != nil {
		return "", fmt.Errorf("listing the WAL files of %s: %w", etcdDir, err)
	}
	// Newest first: the WAL file a running etcd appends to is the last by name, and it is always locked.
	slices.Reverse(wals)
	for _, wal := range wals {
		l, err := fileutil.TryLockFile(wal, os.O_RDWR, fileutil.PrivateFileMode)
		switch {
		case errors.Is(err, fileutil.ErrLocked):
			return wal, nil
		case errors.Is(err, os.ErrNotExist):
			continue // purged by etcd since the listing
		case err != nil:
			return "", fmt.Errorf("checking whether an etcd has %s open: %w", wal, err)
		}
		if err := l.Close(); err != nil {
			return "", fmt.Errorf("releasing the lock just taken on %s: %w", wal, err)
		}
	}
	return "", nil
}

// inUseError says what runs on dataDir's etcd data, from the file it holds locked, and how to stop it: a
// member of certapi's etcd cluster records its local client URL in dataDir
// (etcdcluster.LocalClientURLFileName), the single embedded member does not.
func inUseError(dataDir, locked, member string) error {
	if member != "" {
		return fmt.Errorf("a member of certapi's etcd cluster is running on %s: it holds etcd's lock on %s (its client URL is %s). "+
			"Stop it before restoring into it: scale certapi to zero (kubectl -n <namespace> scale statefulset/certapi --replicas=0) and wait "+
			"until its pods are gone, or stop the certapi that runs with --data-dir=%s", dataDir, locked, member, dataDir)
	}
	return fmt.Errorf("an etcd is running on %s: it holds etcd's lock on %s. Stop the certapi (or etcd) that runs with --data-dir=%s "+
		"before restoring into it (kubectl -n <namespace> scale deploy/certapi --replicas=0, and wait until its pod is gone)", dataDir, locked, dataDir)
}
