package snapshot

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// dbLocked reports whether another open file description holds bbolt's flock on the database file db (a
// running etcd holds LOCK_EX on it); false when db does not exist. It asks for a shared lock without
// waiting and releases it at once.
func dbLocked(db string) (bool, error) {
	f, err := os.Open(db)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, unix.Flock(int(f.Fd()), unix.LOCK_UN)
}
