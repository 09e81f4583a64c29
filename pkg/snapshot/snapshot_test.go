package snapshot_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/certapi/certapi/pkg/apiserver"
	"github.com/certapi/certapi/pkg/snapshot"
)

// shortDir is a fresh directory with a short path: the embedded etcd's sockets live in a data dir.
func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "snap-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// startEtcd starts certapi's own embedded etcd (the one the server runs) in dataDir.
func startEtcd(t *testing.T, dataDir string) (*apiserver.EmbeddedEtcd, *clientv3.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := apiserver.StartEmbeddedEtcd(ctx, dataDir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 10 * time.Second})
	if err != nil {
		e.Stop()
		t.Fatal(err)
	}
	return e, c
}

// TestSaveRestoreRoundTrip saves a snapshot of a running embedded etcd through its socket, restores it into a
// new data dir, and starts the embedded etcd there: the same keys, a revision moved forward, mode 0700.
func TestSaveRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	root := shortDir(t)
	src := filepath.Join(root, "a")
	e, c := startEtcd(t, src)
	const n = 50
	for i := range n {
		if _, err := c.Put(ctx, fmt.Sprintf("/registry/certapi.dev/k%02d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// A key bound to a lease, as the leader's election key is.
	lease, err := c.Grant(ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "/leased", "x", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	before, err := c.Get(ctx, "/registry/certapi.dev/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}

	source, err := snapshot.EmbeddedSource(src)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "s.db")
	info, err := snapshot.Save(ctx, source, file)
	if err != nil {
		t.Fatal(err)
	}
	if info.Keys < n || info.Revision < before.Header.Revision || info.Size == 0 || info.Hash == 0 {
		t.Errorf("snapshot info %+v: want >= %d keys, revision >= %d", info, n, before.Header.Revision)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != info.Size {
		t.Errorf("snapshot file: %v, %v; want mode 0600 and size %d", fi.Mode(), err, info.Size)
	}
	if left, _ := filepath.Glob(filepath.Join(root, ".s.db.part-*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if _, err := snapshot.Save(ctx, source, file); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("a second save to the same file: %v, want a refusal that says it exists", err)
	}
	// The same through a writer (save -), verified once on disk.
	var buf bytes.Buffer
	written, err := snapshot.SaveToWriter(ctx, c, &buf)
	if err != nil || written != int64(buf.Len()) {
		t.Fatalf("SaveToWriter: %d bytes, %v", written, err)
	}
	streamed := filepath.Join(root, "streamed.db")
	if err := os.WriteFile(streamed, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := snapshot.Verify(streamed); err != nil || got.Keys != info.Keys {
		t.Errorf("the streamed snapshot: %+v, %v; want %d keys", got, err, info.Keys)
	}
	// Restoring into the data dir of the etcd that runs is refused.
	if _, err := snapshot.Restore(context.Background(), snapshot.RestoreOptions{SnapshotPath: file, DataDir: src}); err == nil || !strings.Contains(err.Error(), "stop the certapi") {
		t.Errorf("restore into a running data dir: %v, want a refusal", err)
	}
	_ = c.Close()
	e.Stop()

	dst := filepath.Join(root, "b")
	res, err := snapshot.Restore(context.Background(), snapshot.RestoreOptions{SnapshotPath: file, DataDir: dst, RevisionBump: snapshot.DefaultRevisionBump})
	if err != nil {
		t.Fatal(err)
	}
	if res.EtcdDir != filepath.Join(dst, "etcd") || res.MovedAside != "" || res.RevokedLeases != 1 {
		t.Errorf("restore result %+v", res)
	}
	for _, d := range []string{dst, res.EtcdDir} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want mode 0700", d, fi.Mode(), err)
		}
	}
	e2, c2 := startEtcd(t, dst)
	defer e2.Stop()
	defer c2.Close()
	after, err := c2.Get(ctx, "/registry/certapi.dev/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Kvs) != len(before.Kvs) {
		t.Fatalf("restored %d keys, want %d", len(after.Kvs), len(before.Kvs))
	}
	for i := range after.Kvs {
		if string(after.Kvs[i].Key) != string(before.Kvs[i].Key) || string(after.Kvs[i].Value) != string(before.Kvs[i].Value) {
			t.Fatalf("restored key %d is %s=%s, want %s=%s", i, after.Kvs[i].Key, after.Kvs[i].Value, before.Kvs[i].Key, before.Kvs[i].Value)
		}
	}
	if leased, err := c2.Get(ctx, "/leased"); err != nil || len(leased.Kvs) != 0 {
		t.Errorf("the key bound to the snapshot's lease: %v, %d keys; want it deleted with the lease", err, len(leased.Kvs))
	}
	if after.Header.Revision < info.Revision+snapshot.DefaultRevisionBump {
		t.Errorf("revision after restore %d, want at least %d (bumped)", after.Header.Revision, info.Revision+snapshot.DefaultRevisionBump)
	}
	// The restored etcd takes writes.
	if _, err := c2.Put(ctx, "/registry/certapi.dev/new", "x"); err != nil {
		t.Fatal(err)
	}
	// A watch from a revision before the restore is told it is compacted, not left waiting.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wr := <-c2.Watch(wctx, "/registry/certapi.dev/", clientv3.WithPrefix(), clientv3.WithRev(info.Revision))
	if wr.CompactRevision == 0 {
		t.Errorf("a watch from the snapshot's revision %d got %v, want it compacted", info.Revision, wr.Err())
	}
}

// TestRestoreTarget covers what restore does with an existing <data-dir>/etcd.
func TestRestoreTarget(t *testing.T) {
	root := shortDir(t)
	src := filepath.Join(root, "src")
	e, c := startEtcd(t, src)
	if _, err := c.Put(context.Background(), "k", "v"); err != nil {
		t.Fatal(err)
	}
	source, err := snapshot.EmbeddedSource(src)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(root, "s.db")
	if _, err := snapshot.Save(context.Background(), source, file); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	e.Stop()

	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		prepare   func(dataDir string)
		force     bool
		wantErr   string
		wantAside string
	}{
		{name: "absent data dir", prepare: func(string) {}},
		{name: "empty etcd dir", prepare: func(d string) { mkdir(t, filepath.Join(d, "etcd")) }},
		{name: "etcd data refused", prepare: func(d string) { writeFile(t, filepath.Join(d, "etcd", "member", "x")) },
			wantErr: "already holds etcd data"},
		{name: "etcd data moved aside with force", prepare: func(d string) { writeFile(t, filepath.Join(d, "etcd", "member", "x")) },
			force: true, wantAside: "etcd.before-restore-20260102T030405Z"},
		{name: "etcd is a file", prepare: func(d string) { writeFile(t, filepath.Join(d, "etcd")) }, force: true,
			wantErr: "is not a directory"},
		{name: "data dir is a file", prepare: func(d string) { writeFile(t, d) }, wantErr: "is not a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := filepath.Join(root, strings.ReplaceAll(tc.name, " ", "-"))
			tc.prepare(dataDir)
			res, err := snapshot.Restore(context.Background(), snapshot.RestoreOptions{SnapshotPath: file, DataDir: dataDir, Force: tc.force, Now: func() time.Time { return at }})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(res.EtcdDir, "member", "snap", "db")); err != nil {
				t.Errorf("no restored database: %v", err)
			}
			if tc.wantAside == "" {
				if res.MovedAside != "" {
					t.Errorf("moved aside %s", res.MovedAside)
				}
				return
			}
			if res.MovedAside != filepath.Join(dataDir, tc.wantAside) {
				t.Errorf("moved aside to %q, want %q", res.MovedAside, tc.wantAside)
			}
			if _, err := os.Stat(filepath.Join(res.MovedAside, "member", "x")); err != nil {
				t.Errorf("the old data is not kept: %v", err)
			}
		})
	}
}

// TestBadInput: every bad input is refused with an error that names what is wrong.
func TestBadInput(t *testing.T) {
	root := shortDir(t)
	src := filepath.Join(root, "src")
	e, c := startEtcd(t, src)
	source, err := snapshot.EmbeddedSource(src)
	if err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(root, "good.db")
	if _, err := snapshot.Save(context.Background(), source, good); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	e.Stop()
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	file := func(name string, b []byte) string {
		p := filepath.Join(root, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0xff
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(i * 7)
	}

	for _, tc := range []struct {
		name, snapshot, want string
	}{
		{"missing file", filepath.Join(root, "nope.db"), "does not exist"},
		{"a directory", root, "not a regular file"},
		{"empty file", file("empty.db", nil), "not a complete etcd snapshot"},
		{"truncated", file("trunc.db", data[:len(data)-100]), "not a complete etcd snapshot"},
		{"one byte changed", file("flipped.db", flipped), "does not match etcd's SHA-256"},
		{"not a database", file("garbage.db", withTrailer(garbage)), "not a valid etcd snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := snapshot.Verify(tc.snapshot); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Verify: %v, want an error containing %q", err, tc.want)
			}
			dataDir := filepath.Join(root, "restore-"+strings.ReplaceAll(tc.name, " ", "-"))
			if _, err := snapshot.Restore(context.Background(), snapshot.RestoreOptions{SnapshotPath: tc.snapshot, DataDir: dataDir}); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Restore: %v, want an error containing %q", err, tc.want)
			}
			if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
				t.Errorf("a refused restore touched the data dir: %v", err)
			}
		})
	}

	ctx := context.Background()
	for _, tc := range []struct {
		name string
		save func() error
		want string
	}{
		{"no socket", func() error { _, err := snapshot.EmbeddedSource(filepath.Join(root, "none")); return err }, "no embedded etcd socket"},
		{"socket not a socket", func() error {
			d := filepath.Join(root, "plain")
			writeFile(t, filepath.Join(d, "etcd.sock"))
			_, err := snapshot.EmbeddedSource(d)
			return err
		}, "is not a socket"},
		{"missing directory", func() error {
			_, err := snapshot.Save(ctx, source, filepath.Join(root, "no", "s.db"))
			return err
		}, "the snapshot's directory"},
		{"etcd stopped", func() error {
			_, err := snapshot.Save(ctx, snapshot.Source{Endpoints: source.Endpoints, DialTimeout: time.Second}, filepath.Join(root, "late.db"))
			return err
		}, "does not answer"},
		{"bad TLS files", func() error {
			_, err := snapshot.Save(ctx, snapshot.Source{Endpoints: []string{"https://127.0.0.1:1"}, CAFile: filepath.Join(root, "no-ca.crt")}, filepath.Join(root, "tls.db"))
			return err
		}, "--etcd-cafile"},
		{"no endpoints", func() error {
			_, err := snapshot.Save(ctx, snapshot.Source{}, filepath.Join(root, "none.db"))
			return err
		}, "no etcd to snapshot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.save()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	if left, _ := filepath.Glob(filepath.Join(root, ".*.part-*")); len(left) != 0 {
		t.Errorf("temporary files left by failed saves: %v", left)
	}
}

// withTrailer appends etcd's SHA-256 trailer, so that b passes the trailer check and reaches the database check.
func withTrailer(b []byte) []byte {
	sum := sha256.Sum256(b)
	return append(append([]byte(nil), b...), sum[:]...)
}

func mkdir(t *testing.T, d string) {
	t.Helper()
	if err := os.MkdirAll(d, 0o700); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p string) {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSchedule runs the schedule against a real embedded etcd: a snapshot every interval, each one
// restorable, and only the newest Retention kept; a file of another name in the directory stays.
func TestSchedule(t *testing.T) {
	root := shortDir(t)
	e, c := startEtcd(t, filepath.Join(root, "data"))
	defer e.Stop()
	defer c.Close()
	dir := filepath.Join(root, "snapshots")
	mkdir(t, dir)
	writeFile(t, filepath.Join(dir, "manual.db"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	taken := make(chan error)
	s := &snapshot.Schedule{
		Interval:  10 * time.Millisecond,
		Dir:       dir,
		Retention: 2,
		Client:    c,
		// Each snapshot a minute later than the one before: distinct names, in order.
		Now: func() time.Time { clock = clock.Add(time.Minute); return clock },
		Taken: func(_ snapshot.Info, err error) {
			select {
			case taken <- err:
			case <-ctx.Done():
			}
		},
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	for i := range 4 {
		if _, err := c.Put(ctx, "k", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-taken:
			if err != nil {
				t.Fatalf("snapshot %d: %v", i, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("snapshot %d was not taken within a minute", i)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run returned %v after its context ended, want nil", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// Run reads the clock once to schedule the first snapshot (00:01), then once per snapshot (00:02 to 00:05).
	want := []string{"certapi-20260101T000400Z.db", "certapi-20260101T000500Z.db", "manual.db"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Fatalf("snapshot dir holds %v, want %v", names, want)
	}
	for _, n := range want[:2] {
		if _, err := snapshot.Verify(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// TestFreshTwiceInOneSecond erases twice within one second, as two distrusts in a row do: the second
// Fresh takes its snapshot under the next second's name, and removes the first.
func TestFreshTwiceInOneSecond(t *testing.T) {
	root := t.TempDir()
	e, c := startEtcd(t, filepath.Join(root, "data"))
	defer e.Stop()
	defer c.Close()
	dir := filepath.Join(root, "snapshots")
	s := &snapshot.Schedule{Interval: time.Hour, Dir: dir, Retention: 5, Client: c,
		Now: func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }}
	first, _, err := s.Fresh(context.Background())
	if err != nil {
		t.Fatalf("first Fresh: %v", err)
	}
	second, removed, err := s.Fresh(context.Background())
	if err != nil {
		t.Fatalf("second Fresh in the same second: %v", err)
	}
	if filepath.Base(second.Path) != "certapi-20260101T000001Z.db" || !slices.Equal(removed, []string{filepath.Base(first.Path)}) {
		t.Errorf("second Fresh wrote %s and removed %v, want certapi-20260101T000001Z.db and %s", second.Path, removed, filepath.Base(first.Path))
	}
}

// TestSaveFromPassesOverAMemberThatDoesNotAnswer gives SaveFrom a client whose first endpoint is a member
// that does not answer: the snapshot comes from the next one, holding the write made just before it, and a
// client of only dead members gets an error that names them instead of a hang.
func TestSaveFromPassesOverAMemberThatDoesNotAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root := shortDir(t)
	e, c := startEtcd(t, filepath.Join(root, "a"))
	defer e.Stop()
	put, err := c.Put(ctx, "/registry/certapi.dev/last", "x")
	if err != nil {
		t.Fatal(err)
	}
	dead := "unix://" + filepath.Join(root, "gone.sock")
	both, err := clientv3.New(clientv3.Config{Endpoints: []string{dead, e.Endpoint()}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer both.Close()
	info, err := snapshot.SaveFrom(ctx, both, filepath.Join(root, "s.db"))
	if err != nil {
		t.Fatalf("SaveFrom with a dead member first: %v", err)
	}
	if info.Revision < put.Header.Revision {
		t.Errorf("snapshot at revision %d; want at least %d, the last write's", info.Revision, put.Header.Revision)
	}

	only, err := clientv3.New(clientv3.Config{Endpoints: []string{dead}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer only.Close()
	if _, err := snapshot.SaveFrom(ctx, only, filepath.Join(root, "none.db")); err == nil || !strings.Contains(err.Error(), "gone.sock") {
		t.Errorf("SaveFrom with only a dead member: %v; want an error that names it", err)
	}
}
