package apiserver

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/value"

	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/snapshot"
)

// SnapshotOptions configure the etcd snapshots the leader takes on a schedule (docs/backup-and-restore.md).
type SnapshotOptions struct {
	// Interval is the time between two snapshots; 0 takes none.
	Interval time.Duration
	// Dir receives them; empty means <data-dir>/snapshots with the embedded etcd.
	Dir string
	// Retention is how many to keep.
	Retention int
}

// DefaultSnapshotOptions take no snapshots; when turned on, the newest 5 are kept.
func DefaultSnapshotOptions() SnapshotOptions { return SnapshotOptions{Retention: 5} }

// AddFlags adds the snapshot flags to fs.
func (o *SnapshotOptions) AddFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&o.Interval, "snapshot-interval", o.Interval,
		"How often the leader saves an etcd snapshot (the CA, still encrypted as etcd holds it, and every certapi object) into --snapshot-dir, "+
			"as certapi-<UTC time>.db. 0 (the default) takes none. Restore one with: certapi snapshot restore.")
	fs.StringVar(&o.Dir, "snapshot-dir", o.Dir,
		"Where --snapshot-interval puts snapshots (created 0700). Default with the embedded etcd: <data-dir>/snapshots, which survives a "+
			"corrupted etcd or a mistaken delete but not the loss of the volume: point it at another volume. Required with --etcd-servers.")
	fs.IntVar(&o.Retention, "snapshot-retention", o.Retention,
		"How many scheduled snapshots to keep in --snapshot-dir; older ones are deleted. Other files there are never touched.")
}

// Validate reports snapshot flag values certapi cannot run with; embedded says whether the embedded etcd runs.
func (o *SnapshotOptions) Validate(embedded bool) []error {
	var errs []error
	if o.Interval < 0 || (o.Interval > 0 && o.Interval < time.Second) {
		errs = append(errs, fmt.Errorf("--snapshot-interval %s: must be 0 (no snapshots) or at least 1s", o.Interval))
	}
	if o.Retention < 1 {
		errs = append(errs, fmt.Errorf("--snapshot-retention %d: must be at least 1", o.Retention))
	}
	if o.Interval > 0 && o.Dir == "" && !embedded {
		errs = append(errs, errors.New("--snapshot-interval with --etcd-servers needs --snapshot-dir (the default, <data-dir>/snapshots, is for the embedded etcd)"))
	}
	return errs
}

// schedule returns the leader's snapshot schedule, or nil when --snapshot-interval is 0. When the CA keys
// are encrypted (caKeys encrypts), every snapshot gets an integrity record sealed with caKeys.
// It sets certapi_snapshot_interval_seconds, which every replica reports, to the interval (0: none).
func (o *SnapshotOptions) schedule(client *clientv3.Client, dataDir string, caKeys value.Transformer, encrypted bool) *snapshot.Schedule {
	metrics.SnapshotInterval.Set(o.Interval.Seconds())
	if o.Interval == 0 {
		return nil
	}
	dir := o.Dir
	if dir == "" {
		dir = filepath.Join(dataDir, "snapshots")
	}
	var sealer *snapshot.Sealer
	if encrypted && caKeys != nil {
		sealer = snapshot.NewSealer(caKeys)
	}
	return &snapshot.Schedule{
		Interval:  o.Interval,
		Dir:       dir,
		Retention: o.Retention,
		Client:    client,
		Sealer:    sealer,
		Taken: func(_ snapshot.Info, err error) {
			if err != nil {
				metrics.Snapshots.WithLabelValues("failure").Inc()
				return
			}
			metrics.Snapshots.WithLabelValues("success").Inc()
			metrics.SnapshotLastSuccess.SetToCurrentTime()
		},
		Found: func(newest time.Time) {
			metrics.SnapshotLastSuccess.Set(float64(newest.Unix()))
		},
	}
}

// recordDir is where the leader keeps the record of distrusted CAs that restores check
// (snapshot.DistrustedFileName), scheduled snapshots or not: --snapshot-dir, else <data-dir>/snapshots with
// the embedded etcd; empty (none kept) with an external etcd and no --snapshot-dir.
func (o *SnapshotOptions) recordDir(dataDir string, embedded bool) string {
	switch {
	case o.Dir != "":
		return o.Dir
	case embedded && dataDir != "":
		return filepath.Join(dataDir, "snapshots")
	}
	return ""
}
