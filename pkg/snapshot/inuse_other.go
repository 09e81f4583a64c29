//go:build !linux

package snapshot

// dbLocked is the bbolt flock check of inuse_linux.go, which certapi's server (a Linux binary) needs;
// elsewhere lockedBy relies on the WAL locks alone, which etcd's fileutil takes on every platform.
func dbLocked(string) (bool, error) { return false, nil }
