package etcdcluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/snapshot"
)

// TestRestoreIntoOneMemberTheOthersJoin is the several-members restore of docs/backup-and-restore.md,
// k3s's cluster-reset model, on real members: a snapshot of a three-member cluster is taken while it
// runs; every member stops and every member's data is lost; the snapshot is restored into the first
// member's directory alone, as that member (its name and peer URL); then all three start at once, as a
// StatefulSet with parallel pod management starts them. The restored member starts on its data (a new
// one-member cluster holding the snapshot), the two without data join it as learners and are promoted,
// and every member serves the keys written before the snapshot, and not the one written after it.
func TestRestoreIntoOneMemberTheOthersJoin(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, 3)
	w.startAll(w.nodes...)
	w.waitVoters(3)
	c := w.client()
	put(t, c, "/registry/certapi.dev/before", "kept")

	snap := filepath.Join(t.TempDir(), "cluster.db")
	info, err := snapshot.SaveFrom(ctx, c, snap)
	if err != nil {
		t.Fatalf("saving a snapshot of the running cluster: %v", err)
	}
	put(t, c, "/registry/certapi.dev/after", "lost")
	t.Logf("snapshot of the three-member cluster: revision %d, %d keys", info.Revision, info.Keys)

	for _, nd := range w.nodes {
		w.stop(nd)
	}
	for _, nd := range w.nodes {
		if err := os.RemoveAll(nd.dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(nd.dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	first := w.nodes[0]
	res, err := snapshot.Restore(ctx, snapshot.RestoreOptions{SnapshotPath: snap, DataDir: first.dir, MemberName: first.name, PeerURL: first.peerURL})
	if err != nil {
		t.Fatalf("restoring into %s: %v", first.name, err)
	}
	restored := time.Since(start)
	w.startAll(w.nodes...)
	w.waitVoters(3)
	t.Logf("figure: restore of a three-member cluster: snapshot restored into one member in %s (%d leases revoked), three voting members %s after the restore began",
		restored.Round(time.Millisecond), res.RevokedLeases, time.Since(start).Round(time.Millisecond))

	for _, nd := range w.nodes {
		if got := w.getFrom(nd, "/registry/certapi.dev/before"); got != "kept" {
			t.Errorf("%s serves %q for the key written before the snapshot; want %q", nd.name, got, "kept")
		}
		if got := w.getFrom(nd, "/registry/certapi.dev/after"); got != "" {
			t.Errorf("%s serves %q for the key written after the snapshot; want none", nd.name, got)
		}
	}
}
