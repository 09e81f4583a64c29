package etcdcluster

import (
	"bytes"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// Revision is one stored revision of a key in an etcd database file.
type Revision struct {
	Key         string
	ModRevision int64
	Value       []byte
	// Deleted is true for a deletion (a tombstone), which has no value.
	Deleted bool
}

// ReadRevisions reads every revision an etcd database file (a member's member/snap/db, or a snapshot)
// keeps of keys, oldest first, without etcd: it opens the file read-only. The file must not be in use
// by a running etcd (bbolt's lock), which waits for it otherwise.
func ReadRevisions(path string, keys ...string) (out []Revision, err error) {
	defer func() {
		// bbolt panics on some damaged files rather than returning an error.
		if r := recover(); r != nil {
			err = fmt.Errorf("reading %s: the database does not open: %v", path, r)
		}
	}()
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer func() { _ = db.Close() }()
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			return fmt.Errorf("%s holds no etcd key bucket: not an etcd database", path)
		}
		// Keys of the bucket are revisions in order: 8 bytes main, '_', 8 bytes sub, and 't' for a
		// tombstone.
		return b.ForEach(func(rev, v []byte) error {
			var e mvccpb.KeyValue
			if err := proto.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("decoding the key of revision %x: %w", rev, err)
			}
			if !want[string(e.Key)] {
				return nil
			}
			out = append(out, Revision{Key: string(e.Key), ModRevision: e.ModRevision, Value: bytes.Clone(e.Value), Deleted: len(rev) > 17 && rev[17] == 't'})
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return out, nil
}
