package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// Scheduled snapshot files are named certapi-<UTC time>.db in the snapshot directory; the time format sorts
// as it reads, so the newest name is the greatest.
const (
	scheduledPrefix = "certapi-"
	scheduledSuffix = ".db"
	scheduledTime   = "20060102T150405Z"
)

// Schedule takes a snapshot every Interval into Dir and keeps the newest Retention of the files it names,
// deleting older ones; files of other names in Dir are never touched. certapi's leader runs it (see
// docs/backup-and-restore.md for why in-process and not a CronJob).
type Schedule struct {
	// Interval is the time between two snapshots; the first is taken one Interval after Run starts.
	Interval time.Duration
	// Dir receives the snapshots; created 0700 if missing.
	Dir string
	// Retention is how many scheduled snapshots to keep, at least 1.
	Retention int
	// Client is the etcd client to snapshot through.
	Client *clientv3.Client
	// Sealer, when set, writes each snapshot's integrity record beside it (FILE.integrity); pruning removes
	// a record with its snapshot.
	Sealer *Sealer
	// Now gives the time for file names; default time.Now.
	Now func() time.Time
	// Taken, when set, is called after every attempt with its result (for metrics and tests).
	Taken func(info Info, err error)
	// Found, when set, is called as Run starts with the time of the newest scheduled snapshot already in
	// Dir (not called when there is none): a leader new to its term learns of the snapshots taken before
	// it (by itself in an earlier term, or by another replica writing to the same Dir), for the metric of
	// the last snapshot's age.
	Found func(newest time.Time)

	// mu makes Once and Fresh take turns, so that a scheduled snapshot still streaming when Fresh prunes
	// cannot land, older than Fresh's, after it.
	mu sync.Mutex
}

// Run takes snapshots until ctx ends, and then returns nil: a failed snapshot is logged and reported to
// Taken and the next is tried an Interval later; it never ends the leader's term. The first snapshot is due
// an Interval after the newest scheduled one in Dir (at once if that is past), not an Interval after Run
// starts: leadership that changes more often than the Interval (rolling upgrades) still gets snapshots.
func (s *Schedule) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("snapshots")
	newest := s.newest()
	if !newest.IsZero() && s.Found != nil {
		s.Found(newest)
	}
	delay := nextDelay(newest, s.now(), s.Interval)
	t := time.NewTimer(delay)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		info, err := s.Once(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			logger.Error(err, "Scheduled etcd snapshot failed", "dir", s.Dir)
		} else {
			logger.Info("Saved scheduled etcd snapshot", "path", info.Path, "bytes", info.Size, "revision", info.Revision, "keys", info.Keys)
		}
		if s.Taken != nil {
			s.Taken(info, err)
		}
		t.Reset(s.Interval)
	}
}

func (s *Schedule) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// newest returns the time in the name of the newest scheduled snapshot in Dir; zero when there is none.
func (s *Schedule) newest() time.Time {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return time.Time{}
	}
	var newest time.Time
	for _, e := range entries {
		if t, ok := scheduledAt(e.Name()); ok && t.After(newest) {
			newest = t
		}
	}
	return newest
}

// nextDelay is how long to wait for the first snapshot: until an interval after the newest one, at once when
// there is none or that time has passed, and never more than one interval (a newest snapshot in the future
// means a clock that went back).
func nextDelay(newest, now time.Time, interval time.Duration) time.Duration {
	if newest.IsZero() {
		return 0
	}
	return min(max(newest.Add(interval).Sub(now), 0), interval)
}

// Once takes one scheduled snapshot now and prunes the old ones.
func (s *Schedule) Once(ctx context.Context) (Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info, err := s.save(ctx)
	if err != nil {
		return Info{}, err
	}
	names, err := s.names()
	if err != nil {
		return info, err
	}
	return info, s.remove(toPrune(names, s.Retention), nil)
}

// Fresh takes a scheduled snapshot now and removes every scheduled snapshot older than it, whatever the
// Retention, logging each: after a distrust erased etcd's history, every snapshot taken before holds the
// distrusted CAs' keys. It returns the new snapshot and the names of the files it removed.
func (s *Schedule) Fresh(ctx context.Context) (Info, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info, err := s.save(ctx)
	if err != nil {
		return Info{}, nil, err
	}
	names, err := s.names()
	if err != nil {
		return info, nil, err
	}
	var removed []string
	err = s.remove(olderThan(names, filepath.Base(info.Path)), func(name string) {
		removed = append(removed, name)
		klog.FromContext(ctx).Info("Removed a scheduled etcd snapshot taken before the erasure", "path", filepath.Join(s.Dir, name))
	})
	return info, removed, err
}

// names lists the files in Dir.
func (s *Schedule) names() ([]string, error) {
	entries, err := os.ReadDir(s.Dir)
	if err != nil {
		return nil, fmt.Errorf("listing the snapshot directory %s: %w", s.Dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}

// remove deletes the named files of Dir and their integrity records, calling removed (when set) for each
// snapshot it deleted.
func (s *Schedule) remove(names []string, removed func(name string)) error {
	var errs []error
	for _, n := range names {
		if err := os.Remove(filepath.Join(s.Dir, n+IntegritySuffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing an old snapshot's integrity record: %w", err))
		}
		err := os.Remove(filepath.Join(s.Dir, n))
		switch {
		case err == nil:
			if removed != nil {
				removed(n)
			}
		case !errors.Is(err, os.ErrNotExist):
			errs = append(errs, fmt.Errorf("removing old snapshot: %w", err))
		}
	}
	return errors.Join(errs...)
}

// save takes one scheduled snapshot into Dir, named for the time now. When a snapshot of this second
// is there already (two distrusts erased in one second, or Fresh right after a scheduled one), the name
// takes the first later second that is free, so that it still sorts after every snapshot taken before
// it: Fresh removes those by name.
func (s *Schedule) save(ctx context.Context) (Info, error) {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return Info{}, fmt.Errorf("creating the snapshot directory %s: %w", s.Dir, err)
	}
	names, err := s.names()
	if err != nil {
		return Info{}, err
	}
	return SaveFromSealed(ctx, s.Client, filepath.Join(s.Dir, scheduledName(s.now(), names)), s.Sealer)
}

// scheduledName is the name of a scheduled snapshot taken at now: certapi-<now>.db, or of the first
// later second whose name is not among taken (names of Dir, with integrity records beside snapshots).
func scheduledName(now time.Time, taken []string) string {
	t := now.UTC().Truncate(time.Second)
	for {
		name := scheduledPrefix + t.Format(scheduledTime) + scheduledSuffix
		if !slices.Contains(taken, name) && !slices.Contains(taken, name+IntegritySuffix) {
			return name
		}
		t = t.Add(time.Second)
	}
}

// olderThan returns the scheduled snapshot names among names that sort before newest (they were taken
// before it), oldest first. Other names are never returned.
func olderThan(names []string, newest string) []string {
	var out []string
	for _, n := range names {
		if _, ok := scheduledAt(n); ok && n < newest {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// toPrune returns the scheduled snapshot names among names beyond the newest keep, oldest first. Names that
// are not a scheduled snapshot's (other files, temporary files of a save in progress) are never returned.
func toPrune(names []string, keep int) []string {
	var scheduled []string
	for _, n := range names {
		if _, ok := scheduledAt(n); ok {
			scheduled = append(scheduled, n)
		}
	}
	slices.Sort(scheduled)
	keep = max(keep, 1)
	if len(scheduled) <= keep {
		return nil
	}
	return scheduled[:len(scheduled)-keep]
}

// scheduledAt returns the time in a scheduled snapshot's name, and false for any other name.
func scheduledAt(name string) (time.Time, bool) {
	if !strings.HasPrefix(name, scheduledPrefix) || !strings.HasSuffix(name, scheduledSuffix) {
		return time.Time{}, false
	}
	t, err := time.Parse(scheduledTime, strings.TrimSuffix(strings.TrimPrefix(name, scheduledPrefix), scheduledSuffix))
	return t, err == nil
}
