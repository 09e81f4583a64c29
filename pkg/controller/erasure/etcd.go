package erasure

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/snapshot"
)

// compactRevKey is where k8s.io/apiserver's storage compactor keeps the revision it last compacted at.
const compactRevKey = "compact_rev_key"

// Outcome is what an erasure did.
type Outcome struct {
	// External is true when certapi stores in an etcd it does not own and left it as it was.
	External bool
	// Revision is the revision etcd was compacted at (with External, its current revision).
	Revision int64
	// Defragmented are the endpoints of the members defragmented.
	Defragmented []string
	// Snapshot is the fresh scheduled snapshot; empty when none are scheduled.
	Snapshot string
	// Removed are the scheduled snapshots removed: every one taken before Snapshot.
	Removed []string
}

// Etcd erases etcd's history: it compacts certapi's etcd at its current revision, so that no earlier
// revision of the CA record can be read, defragments every member, so that the freed pages that held them
// are gone from the database files (and from the snapshots taken after), and replaces the scheduled
// snapshots with a fresh one.
type Etcd struct {
	// Client is certapi's etcd client.
	Client *clientv3.Client
	// Owned is whether certapi owns the etcd (the embedded one). An etcd given with --etcd-servers is
	// another's: compaction is cluster-wide and drops the history of every other user of its keyspace,
	// and defragmentation stops each member while it runs, so certapi only says what to run.
	Owned bool
	// Cluster is whether the etcd is certapi's own cluster of members: every member is found through
	// the member list, not only the client's endpoints.
	Cluster bool
	// Snapshots, when set, is the leader's snapshot schedule.
	Snapshots *snapshot.Schedule
	// RecordDir is where the record of distrusted CAs is kept (the snapshot directory, scheduled snapshots
	// or not); default Snapshots.Dir. Empty with no Snapshots: none is kept.
	RecordDir string
}

// DistrustedRecord is snapshot.DistrustedFileName in RecordDir (or the scheduled snapshots' directory).
func (e *Etcd) DistrustedRecord() string {
	dir := e.RecordDir
	if dir == "" && e.Snapshots != nil {
		dir = e.Snapshots.Dir
	}
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, snapshot.DistrustedFileName)
}

// Erase compacts, defragments and takes a fresh snapshot; see Etcd. It is safe to run again: a revision
// already compacted is not an error.
func (e *Etcd) Erase(ctx context.Context) (Outcome, error) {
	logger := klog.FromContext(ctx)
	resp, err := e.Client.Get(ctx, compactRevKey, clientv3.WithCountOnly())
	if err != nil {
		return Outcome{}, fmt.Errorf("reading etcd's current revision: %w", err)
	}
	out := Outcome{Revision: resp.Header.Revision, External: !e.Owned}
	if out.External {
		return out, nil
	}
	// Recorded where the storage layer's own compactor (k8s.io/apiserver's etcd3) records the revision it
	// compacted at: it takes this one up, rather than fail compacting at an older one.
	if _, err := e.Client.Put(ctx, compactRevKey, strconv.FormatInt(out.Revision, 10)); err != nil {
		return out, fmt.Errorf("recording the revision to compact at: %w", err)
	}
	if _, err := e.Client.Compact(ctx, out.Revision, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return out, fmt.Errorf("compacting etcd at revision %d: %w", out.Revision, err)
	}
	logger.Info("Compacted etcd after a distrust", "revision", out.Revision)
	// A member that cannot be listed or reached is reported, after the others are done, and the whole
	// erasure is tried again.
	eps, err := e.endpoints(ctx)
	errs := []error{err}
	for _, ep := range eps {
		// One member at a time: a member does not serve while it defragments.
		if _, err := e.Client.Defragment(ctx, ep); err != nil {
			errs = append(errs, fmt.Errorf("defragmenting the etcd member at %s: %w", ep, err))
			continue
		}
		out.Defragmented = append(out.Defragmented, ep)
		logger.Info("Defragmented an etcd member after a distrust", "endpoint", ep)
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	if e.Snapshots == nil {
		return out, nil
	}
	info, removed, err := e.Snapshots.Fresh(ctx)
	out.Snapshot, out.Removed = info.Path, removed
	if err != nil {
		return out, fmt.Errorf("replacing the scheduled snapshots: %w", err)
	}
	logger.Info("Saved a fresh etcd snapshot after a distrust", "path", info.Path, "revision", info.Revision, "removed", len(removed))
	return out, nil
}

// endpoints are the client endpoints of every member to defragment: each member's of the member list in
// certapi's own cluster (members join and leave after the client was made), else the client's.
func (e *Etcd) endpoints(ctx context.Context) ([]string, error) {
	if !e.Cluster {
		return e.Client.Endpoints(), nil
	}
	resp, err := e.Client.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing etcd's members to defragment each: %w", err)
	}
	var eps []string
	var errs []error
	for _, m := range resp.Members {
		if len(m.ClientURLs) == 0 {
			errs = append(errs, fmt.Errorf("the etcd member %s has not started: it cannot be defragmented yet", m.Name))
			continue
		}
		eps = append(eps, m.ClientURLs[0])
	}
	return eps, errors.Join(errs...)
}
