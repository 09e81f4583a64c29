package testhelpers

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Eventually calls cond every interval, the first time at once, until it returns true, and fails t when
// timeout passes first. An error from cond ends the wait at once and fails t with it: return one for
// what must never be seen on the way (a process that exited, a state that must not exist).
func Eventually(t testing.TB, interval, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// WaitFor calls cond every interval, the first time at once, until it returns true, and fails t when
// timeout passes first, with cond's last word (the last one it said, when it said nothing since): what
// it saw, or why it could not look (an API call that failed a moment does not end the wait). It returns
// how long the wait took.
func WaitFor(t testing.TB, interval, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), interval, timeout, true, func(ctx context.Context) (bool, error) {
		ok, seen := cond(ctx)
		// A look cut short by the deadline says only that; what the look before it saw says why.
		if seen != "" && (ctx.Err() == nil || last == "") {
			last = seen
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: last seen: %s", timeout, what, last)
	}
	return time.Since(start)
}

// LastWord makes a condition for WaitFor of one that returns an error when it cannot look: the error is
// its word, and the wait goes on.
func LastWord(cond func(ctx context.Context) (bool, error)) func(ctx context.Context) (bool, string) {
	return func(ctx context.Context) (bool, string) {
		ok, err := cond(ctx)
		if err != nil {
			return false, err.Error()
		}
		return ok, ""
	}
}
