package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PollUntil calls cond every interval, the first time at once, until it reports done, timeout
// passes, ctx ends, or every process of procs (when there are any) has exited. cond's status
// string, what it saw last, goes into the error on timeout, with the last lines of the processes'
// logs; when the processes exited the error is their ExitError. The error starts "waiting for
// <what>: ".
func PollUntil(ctx context.Context, interval, timeout time.Duration, what string, procs []*Process, cond func(context.Context) (bool, string)) error {
	var last string
	var exited error
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		if len(procs) > 0 {
			var errs []error
			for _, p := range procs {
				if done, _ := p.Exited(); !done {
					break
				}
				errs = append(errs, p.ExitError())
			}
			if len(errs) == len(procs) {
				exited = errors.Join(errs...)
				return false, exited
			}
		}
		ok, status := cond(ctx)
		last = status
		return ok, nil
	})
	switch {
	case err == nil:
		return nil
	case exited != nil:
		return fmt.Errorf("waiting for %s: %w", what, exited)
	default:
		msg := fmt.Sprintf("waiting for %s: gave up after %s (%v); last status: %s", what, since(start), err, last)
		for _, p := range procs {
			msg += fmt.Sprintf("\nlast lines of %s:\n%s", p.logPath, tailFile(p.logPath, 30))
		}
		return errors.New(msg)
	}
}
