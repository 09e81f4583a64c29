package snapshot

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestToPrune(t *testing.T) {
	for _, tc := range []struct {
		name  string
		names []string
		keep  int
		want  []string
	}{
		{"none", nil, 3, nil},
		{"fewer than kept", []string{"certapi-20260101T000000Z.db", "certapi-20260102T000000Z.db"}, 3, nil},
		{"exactly kept", []string{"certapi-20260101T000000Z.db", "certapi-20260102T000000Z.db"}, 2, nil},
		{"oldest go, in any listing order",
			[]string{"certapi-20260103T000000Z.db", "certapi-20260101T000000Z.db", "certapi-20260104T000000Z.db", "certapi-20260102T000000Z.db"}, 2,
			[]string{"certapi-20260101T000000Z.db", "certapi-20260102T000000Z.db"}},
		{"other files are never pruned",
			[]string{"certapi-20260101T000000Z.db", "mine.db", "certapi-manual.db", ".certapi-20260102T000000Z.db.part-123", "certapi-20260102T000000Z.db.bak", "certapi-20260102T000000Z.db"}, 1,
			[]string{"certapi-20260101T000000Z.db"}},
		{"keep below 1 keeps 1", []string{"certapi-20260101T000000Z.db", "certapi-20260102T000000Z.db"}, 0, []string{"certapi-20260101T000000Z.db"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := toPrune(tc.names, tc.keep); !slices.Equal(got, tc.want) {
				t.Errorf("toPrune = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestScheduledName checks that a snapshot taken in the same second as one in the directory gets the
// next free second, so that it sorts after it (Fresh removes every name before its own).
func TestScheduledName(t *testing.T) {
	now := time.Date(2026, 1, 3, 0, 0, 0, 700_000_000, time.UTC)
	for _, tc := range []struct {
		name  string
		taken []string
		want  string
	}{
		{"an empty directory", nil, "certapi-20260103T000000Z.db"},
		{"other files", []string{"certapi-20260102T000000Z.db", "mine.db"}, "certapi-20260103T000000Z.db"},
		{"this second taken", []string{"certapi-20260103T000000Z.db"}, "certapi-20260103T000001Z.db"},
		{"this second's integrity record left", []string{"certapi-20260103T000000Z.db" + IntegritySuffix}, "certapi-20260103T000001Z.db"},
		{"two seconds taken", []string{"certapi-20260103T000001Z.db", "certapi-20260103T000000Z.db"}, "certapi-20260103T000002Z.db"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := scheduledName(now, tc.taken)
			if got != tc.want {
				t.Errorf("scheduledName = %s, want %s", got, tc.want)
			}
			if older := olderThan(append(tc.taken, got), got); len(older) != len(slices.DeleteFunc(slices.Clone(tc.taken), func(n string) bool {
				_, ok := scheduledAt(n)
				return !ok
			})) {
				t.Errorf("olderThan(%s) = %v: not every snapshot taken before sorts before it", got, older)
			}
		})
	}
}

func TestOlderThan(t *testing.T) {
	const fresh = "certapi-20260103T000000Z.db"
	for _, tc := range []struct {
		name  string
		names []string
		want  []string
	}{
		{"only the fresh one", []string{fresh}, nil},
		{"every older one goes, whatever the retention, in any listing order",
			[]string{fresh, "certapi-20260102T000000Z.db", "certapi-20251231T235959Z.db", "certapi-20260101T000000Z.db"},
			[]string{"certapi-20251231T235959Z.db", "certapi-20260101T000000Z.db", "certapi-20260102T000000Z.db"}},
		{"a newer one (a clock that went back) stays", []string{"certapi-20260104T000000Z.db", fresh}, nil},
		{"other files are never removed",
			[]string{"mine.db", "certapi-manual.db", ".certapi-20260102T000000Z.db.part-1", "certapi-20260102T000000Z.db.bak", "certapi-20260102T000000Z.db", fresh},
			[]string{"certapi-20260102T000000Z.db"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := olderThan(tc.names, fresh); !slices.Equal(got, tc.want) {
				t.Errorf("olderThan = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNextDelay(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		newest time.Time
		want   time.Duration
	}{
		{"no snapshot yet: at once", time.Time{}, 0},
		{"the newest is older than an interval: at once", now.Add(-2 * time.Hour), 0},
		{"exactly an interval ago: at once", now.Add(-time.Hour), 0},
		{"taken 20 minutes ago: in 40", now.Add(-20 * time.Minute), 40 * time.Minute},
		{"taken just now: in an interval", now, time.Hour},
		{"in the future (the clock went back): one interval at most", now.Add(5 * time.Hour), time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextDelay(tc.newest, now, time.Hour); got != tc.want {
				t.Errorf("nextDelay = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestScheduleFound: a leader's schedule reports, as it starts, the newest scheduled snapshot already in its
// directory (for the metric of the last snapshot's age), ignoring files of other names.
func TestScheduleFound(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"certapi-20260101T000000Z.db", "certapi-20260101T060000Z.db", "certapi-20990101T000000Z.db.bak", "mine.db"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var found time.Time
	s := &Schedule{
		Interval: time.Hour, Dir: dir, Retention: 1,
		// The newest is 10 minutes old: the first snapshot is due in 50, long after Found ends the test.
		Now:   func() time.Time { return time.Date(2026, 1, 1, 6, 10, 0, 0, time.UTC) },
		Found: func(newest time.Time) { found = newest; cancel() },
		Taken: func(Info, error) { t.Error("a snapshot was taken; want none before the interval") },
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not report the newest snapshot in its directory (Found) within a minute")
	}
	if want := time.Date(2026, 1, 1, 6, 0, 0, 0, time.UTC); !found.Equal(want) {
		t.Errorf("Found reported %s; want the newest scheduled snapshot's time, %s", found, want)
	}
}
