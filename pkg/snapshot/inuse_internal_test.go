//go:build linux

package snapshot

import (
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/fileutil"
	"golang.org/x/sys/unix"
)

// TestLockedBy holds, in this test, each lock a running etcd holds on its data directory, and checks that
// lockedBy finds it, and finds nothing in a directory nobody holds or that does not exist. A lock is per
// open file description, so one taken here conflicts with lockedBy's attempt as another process's would.
func TestLockedBy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		files  []string // created under the etcd directory
		hold   string   // the file held locked, as etcd holds it; "" for none
		byWAL  bool     // hold it with the WAL's lock (fileutil) instead of bbolt's (flock)
		absent bool     // no etcd directory at all
	}{
		{name: "no etcd directory", absent: true},
		{name: "data nobody holds", files: []string{"member/snap/db", "member/wal/0000000000000000-0000000000000000.wal"}},
		{name: "the database held, as bbolt holds it", files: []string{"member/snap/db", "member/wal/0000000000000000-0000000000000000.wal"}, hold: "member/snap/db"},
		{name: "the newest WAL file held, as etcd's WAL holds it", files: []string{"member/snap/db", "member/wal/0000000000000000-0000000000000000.wal",
			"member/wal/0000000000000001-0000000000000010.wal"}, hold: "member/wal/0000000000000001-0000000000000010.wal", byWAL: true},
		{name: "a WAL file held, no database yet", files: []string{"member/wal/0000000000000000-0000000000000000.wal"},
			hold: "member/wal/0000000000000000-0000000000000000.wal", byWAL: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "etcd")
			for _, f := range tc.files {
				p := filepath.Join(dir, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if tc.hold != "" {
				p := filepath.Join(dir, tc.hold)
				if tc.byWAL {
					l, err := fileutil.LockFile(p, os.O_RDWR, fileutil.PrivateFileMode)
					if err != nil {
						t.Fatal(err)
					}
					defer l.Close()
				} else {
					f, err := os.OpenFile(p, os.O_RDWR, 0)
					if err != nil {
						t.Fatal(err)
					}
					defer f.Close()
					if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
						t.Fatal(err)
					}
				}
			}
			got, err := lockedBy(dir)
			if err != nil {
				t.Fatal(err)
			}
			want := ""
			if tc.hold != "" {
				want = filepath.Join(dir, tc.hold)
			}
			if got != want {
				t.Fatalf("lockedBy = %q, want %q", got, want)
			}
			// Asking took no lock for good: asking again gives the same answer.
			if again, err := lockedBy(dir); err != nil || again != got {
				t.Fatalf("lockedBy asked again = %q, %v; want %q", again, err, got)
			}
		})
	}
}
