package controller

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// waitFor polls cond every millisecond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestQueue: every outcome of a sync does what the controllers rely on: an error retries the key with
// backoff, After re-queues it once after that long, success forgets it; a key is never synced by two
// workers at once; Run returns only after every worker finished.
func TestQueue(t *testing.T) {
	cases := []struct {
		name string
		// outcomes of successive syncs of one key
		outcomes  []func() (Result, error)
		wantSyncs int
	}{
		{name: "success once", outcomes: []func() (Result, error){ok(0)}, wantSyncs: 1},
		{name: "error retried until success", outcomes: []func() (Result, error){fail, fail, ok(0)}, wantSyncs: 3},
		{name: "After re-queues once", outcomes: []func() (Result, error){ok(5 * time.Millisecond), ok(0)}, wantSyncs: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			syncs := 0
			q := NewQueue(QueueOptions[string]{Name: "test", Workers: 4, BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond,
				Sync: func(context.Context, string) (Result, error) {
					mu.Lock()
					defer mu.Unlock()
					n := syncs
					syncs++
					if n >= len(tc.outcomes) {
						t.Errorf("sync %d: more syncs than outcomes", n+1)
						return Result{}, nil
					}
					return tc.outcomes[n]()
				}})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { q.Run(ctx); close(done) }()
			q.Add("k")
			waitFor(t, "every sync", func() bool { mu.Lock(); defer mu.Unlock(); return syncs == tc.wantSyncs })
			cancel()
			<-done
		})
	}
}

func ok(after time.Duration) func() (Result, error) {
	return func() (Result, error) { return Result{After: after}, nil }
}

func fail() (Result, error) { return Result{}, errors.New("boom") }

// TestQueueOneWorkerPerKey: with many workers and a key added again while it is being synced, no two
// syncs of that key overlap, and the later add is not lost.
func TestQueueOneWorkerPerKey(t *testing.T) {
	var running, overlaps, syncs atomic.Int32
	release := make(chan struct{})
	q := NewQueue(QueueOptions[string]{Name: "test", Workers: 8, Sync: func(context.Context, string) (Result, error) {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		if syncs.Add(1) == 1 {
			<-release
		}
		running.Add(-1)
		return Result{}, nil
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Run(ctx); close(done) }()
	q.Add("k")
	waitFor(t, "the first sync to start", func() bool { return syncs.Load() == 1 })
	q.Add("k")
	q.Add("k")
	close(release)
	waitFor(t, "the second sync", func() bool { return syncs.Load() == 2 })
	cancel()
	<-done
	if overlaps.Load() != 0 {
		t.Errorf("%d overlapping syncs of one key", overlaps.Load())
	}
	if syncs.Load() != 2 {
		t.Errorf("%d syncs; want 2 (adds while queued are merged)", syncs.Load())
	}
}

// TestRunTermEndsOnFailure: a controller that fails ends the term for all, and RunTerm says which.
func TestRunTermEndsOnFailure(t *testing.T) {
	c := &Context{}
	var stopped atomic.Bool
	err := c.RunTerm(context.Background(),
		Named{Name: "healthy", Runnable: runnableFunc(func(ctx context.Context) error { <-ctx.Done(); stopped.Store(true); return nil })},
		Named{Name: "broken", Runnable: runnableFunc(func(context.Context) error { return errors.New("cannot watch") })},
	)
	if err == nil || err.Error() != "broken: cannot watch" {
		t.Errorf("RunTerm = %v; want the broken controller's error", err)
	}
	if !stopped.Load() {
		t.Error("the healthy controller was not stopped when the term ended")
	}
}

type runnableFunc func(context.Context) error

func (f runnableFunc) Run(ctx context.Context) error { return f(ctx) }
