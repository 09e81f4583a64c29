package etcdcluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/etcdcluster"
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

// TestRestoreWhileTheOthersKeepTheirData is the several-members restore without the step that is easy to
// get wrong: the snapshot is restored into the first member (its old data moved aside) with cluster epoch
// 1, and the other two keep the data of before the restore. Two members of three are a quorum: started on
// that data they would restart the old cluster beside the restored one. Started with
// --etcd-cluster-epoch 1, all three at once, they move their data aside and join the restored member, and
// every member serves the restored keys. The snapshot is saved as in a member's pod, through the second
// member's data dir. A member then started with the old epoch 0 on data of epoch 1 is
// refused with a message that names the flag.
func TestRestoreWhileTheOthersKeepTheirData(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, 3)
	w.startAll(w.nodes...)
	w.waitVoters(3)
	c := w.client()
	put(t, c, "/registry/certapi.dev/before", "kept")
	// As `certapi snapshot save --data-dir` in a member's pod: the member found through its data dir.
	src, err := snapshot.EmbeddedSource(w.nodes[1].dir)
	if err != nil {
		t.Fatalf("finding the member in %s's data dir: %v", w.nodes[1].name, err)
	}
	snap := filepath.Join(t.TempDir(), "cluster.db")
	if _, err := snapshot.Save(ctx, src, snap); err != nil {
		t.Fatalf("saving a snapshot through %s's data dir: %v", w.nodes[1].name, err)
	}
	put(t, c, "/registry/certapi.dev/after", "lost")
	for _, nd := range w.nodes {
		w.stop(nd)
	}

	first := w.nodes[0]
	res, err := snapshot.Restore(ctx, snapshot.RestoreOptions{SnapshotPath: snap, DataDir: first.dir, MemberName: first.name,
		PeerURL: first.peerURL, ClusterEpoch: 1, Force: true})
	if err != nil {
		t.Fatalf("restoring into %s: %v", first.name, err)
	}
	if res.MovedAside == "" {
		t.Errorf("the restore into %s moved no old data aside", first.name)
	}
	w.epoch = 1
	start := time.Now()
	w.startAll(w.nodes...)
	w.waitVoters(3)
	t.Logf("figure: restore with two members keeping their old data: three voting members %s after they started",
		time.Since(start).Round(time.Millisecond))
	for _, nd := range w.nodes {
		if got := w.getFrom(nd, "/registry/certapi.dev/before"); got != "kept" {
			t.Errorf("%s serves %q for the key written before the snapshot; want %q", nd.name, got, "kept")
		}
		if got := w.getFrom(nd, "/registry/certapi.dev/after"); got != "" {
			t.Errorf("%s serves %q for the key written after the snapshot: the old cluster is back", nd.name, got)
		}
	}
	for _, nd := range w.nodes[1:] {
		aside, _ := filepath.Glob(filepath.Join(nd.dir, "etcd.before-epoch-1-*"))
		if len(aside) != 1 {
			t.Errorf("%s: the data of epoch 0 moved aside to %v; want one etcd.before-epoch-1-<time>", nd.name, aside)
		}
		if got, err := etcdcluster.ReadEpoch(filepath.Join(nd.dir, "etcd")); err != nil || got != 1 {
			t.Errorf("%s: its new data records epoch %d (%v); want 1", nd.name, got, err)
		}
	}

	// The flag not raised on one member: it refuses, rather than take the restored data for older.
	last := w.nodes[2]
	w.stop(last)
	w.epoch = 0
	err = w.startFor(last, 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "--etcd-cluster-epoch=1") {
		t.Errorf("starting %s with epoch 0 on data of epoch 1: %v; want a refusal that names --etcd-cluster-epoch=1", last.name, err)
	}
}

// TestEpochRaisedWithoutARestore: --etcd-cluster-epoch raised with no restore behind it (a mistyped Helm
// value) while every member is down, then all started at once, as after a scale to zero. No member holds
// data of the new epoch, so nobody answers: each must wait with its data in place, never move it aside
// (three members without data would bootstrap an empty cluster, and certapi a new CA). Started with the
// epoch of their data again, they are the cluster of before.
func TestEpochRaisedWithoutARestore(t *testing.T) {
	w := newWorld(t, 3)
	w.startAll(w.nodes...)
	w.waitVoters(3)
	put(t, w.client(), "/registry/certapi.dev/before", "kept")
	for _, nd := range w.nodes {
		w.stop(nd)
	}

	w.epoch = 1
	errs := make([]error, len(w.nodes))
	var wg sync.WaitGroup
	for i, nd := range w.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = w.startFor(nd, 5*time.Second) }()
	}
	wg.Wait()
	for i, nd := range w.nodes {
		if errs[i] == nil {
			w.stop(nd)
			t.Errorf("%s started with epoch 1 on data of epoch 0 while no member had data of epoch 1; want it to wait", nd.name)
		}
		if aside, _ := filepath.Glob(filepath.Join(nd.dir, "etcd.before-epoch-*")); len(aside) > 0 {
			t.Errorf("%s moved its data aside (%v) with no restored member to join", nd.name, aside)
		}
		if got, err := etcdcluster.ReadEpoch(filepath.Join(nd.dir, "etcd")); err != nil || got != 0 {
			t.Errorf("%s: its data records epoch %d (%v); want 0, untouched", nd.name, got, err)
		}
	}

	w.epoch = 0
	w.startAll(w.nodes...)
	w.waitVoters(3)
	for _, nd := range w.nodes {
		if got := w.getFrom(nd, "/registry/certapi.dev/before"); got != "kept" {
			t.Errorf("%s serves %q for the key written before; want %q", nd.name, got, "kept")
		}
	}
}
