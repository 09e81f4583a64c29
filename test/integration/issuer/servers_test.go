package issuer_test

import (
	"context"
	"testing"
	"time"
)

// TestWatchServingPushesReplicaRecords: the leader's pending distrust learns of a replica's new serving
// record, and of a replica whose record expired, from WatchServing as it happens, and ServingNotFrom
// agrees with what was pushed.
func TestWatchServingPushesReplicaRecords(t *testing.T) {
	prefix := "/" + t.Name()
	a, b := startIssuer(t, prefix, "a"), startIssuer(t, prefix, "b")
	leader := waitLeader(t, a, b)

	changes := make(chan struct{}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- leader.WatchServing(ctx, func() { changes <- struct{}{} }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchServing: %v", err)
		}
	})

	expectChange := func(what string) {
		t.Helper()
		select {
		case <-changes:
		case <-time.After(30 * time.Second):
			t.Fatalf("no change pushed after %s", what)
		}
	}
	pctx, pcancel := context.WithCancel(context.Background())
	defer pcancel()
	// The watch may start after the first write; publish until one is seen, each a distinct record.
	published := false
	for i := 0; i < 50 && !published; i++ {
		if err := b.PublishServing(pctx, "01"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changes:
			published = true
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !published {
		t.Fatal("no change pushed after a replica published its serving record")
	}
	if err := a.PublishServing(pctx, "02"); err != nil {
		t.Fatal(err)
	}
	expectChange("a second replica published its serving record")
	n, err := leader.ServingNotFrom(context.Background(), "02")
	if err != nil || n != 1 {
		t.Fatalf("ServingNotFrom(02) = %d, %v; want 1 (replica b serves from 01)", n, err)
	}
	if err := b.PublishServing(pctx, "02"); err != nil {
		t.Fatal(err)
	}
	expectChange("a replica re-issued its serving certificate")
	if n, err := leader.ServingNotFrom(context.Background(), "02"); err != nil || n != 0 {
		t.Fatalf("ServingNotFrom(02) = %d, %v; want 0", n, err)
	}
}
