package etcdcluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRetry: retry calls its function until it is done or fails, going on at the cap of its backoff
// (not stopping there as wait.ExponentialBackoff does), and ends with its context.
func TestRetry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	calls := 0
	if err := retry(ctx, time.Microsecond, 2*time.Microsecond, func(context.Context) (bool, error) {
		calls++
		return calls == 50, nil
	}); err != nil || calls != 50 {
		t.Fatalf("retry = %v after %d calls; want nil after 50", err, calls)
	}

	failed := errors.New("refused")
	calls = 0
	if err := retry(ctx, time.Microsecond, time.Microsecond, func(context.Context) (bool, error) {
		calls++
		if calls == 3 {
			return false, failed
		}
		return false, nil
	}); !errors.Is(err, failed) || calls != 3 {
		t.Fatalf("retry = %v after %d calls; want the function's error after 3", err, calls)
	}

	ended, end := context.WithCancel(ctx)
	if err := retry(ended, time.Hour, time.Hour, func(context.Context) (bool, error) {
		end()
		return false, nil
	}); !errors.Is(err, context.Canceled) {
		t.Fatalf("retry = %v once its context ended; want context.Canceled", err)
	}
}
