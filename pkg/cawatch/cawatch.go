// Package cawatch follows CertificateAuthority/default, the one object that says which CA signs and
// what every client must trust. It is the one way certapi's clients watch it: the library
// (pkg/servingcert, which certapi also runs for its own serving certificate, over its own storage) and
// the kubectl plugin (rotate --wait, distrust --wait and check --wait). It watches with `watch` alone,
// restricted to that name by a field selector so that RBAC resourceNames apply. A watch without a
// resourceVersion starts with the object's current state, so no get or list is needed, and no
// resourceVersion can be too old after certapi restarts.
package cawatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// Options says how Follow retries. The zero value retries failures from 500 ms doubling to 30 s and
// returns a refusal (403) as an error.
type Options struct {
	// Clock times the waits between attempts; default the real clock.
	Clock clock.Clock
	// Backoff is the wait after the n-th failure in a row (n >= 1).
	Backoff func(n int) time.Duration
	// HealthyAfter: a watch the server ends after running at least this long is not a failure, and the
	// next one starts at once. Default 30 s.
	HealthyAfter time.Duration
	// Refused, when set, is called for each refusal (403) in a row (refusals counts them) and returns
	// how long to wait before asking again: RBAC may be granted later, and a replica that is starting
	// can refuse for a moment. Unset, Follow returns the refusal.
	Refused func(refusals int, err error) time.Duration
	// Allowed, when set, is called when a watch is allowed after a refusal.
	Allowed func()
	// Failed, when set, is told of every other failure and the wait before the next attempt.
	Failed func(err error, retryIn time.Duration)
}

// Handler is given CertificateAuthority/default's current state, then each change. It returns done to
// end Follow, or an error to end it with that error.
type Handler func(ca *certapiv1alpha1.CertificateAuthority) (done bool, err error)

// Watcher starts a watch of CertificateAuthorities: the typed client's CertificateAuthorityInterface is
// one, and so is anything else with this method (pkg/servingcert's Issuer, through an adapter).
type Watcher interface {
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Follow watches CertificateAuthority/default and calls handle with each state of it until handle says
// done (nil), handle fails (its error), a refusal is returned (see Options.Refused) or ctx ends
// (ctx.Err()). It retries every other failure.
func Follow(ctx context.Context, cas Watcher, o Options, handle Handler) error {
	o.defaults()
	selector := fields.OneTermEqualSelector("metadata.name", certapiv1alpha1.CertificateAuthorityName).String()
	failures, refusals := 0, 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		w, err := cas.Watch(ctx, metav1.ListOptions{FieldSelector: selector})
		if err == nil {
			if refusals > 0 && o.Allowed != nil {
				o.Allowed()
			}
			refusals = 0
			begin := o.Clock.Now()
			var done bool
			done, err = consume(ctx, w, handle)
			w.Stop()
			var handlerErr handlerError
			switch {
			case done:
				return nil
			case errors.As(err, &handlerErr):
				return handlerErr.err
			case err == nil && o.Clock.Since(begin) >= o.HealthyAfter:
				failures = 0
				continue // the server ended a watch that ran for a while: start again at once
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var wait time.Duration
		if apierrors.IsForbidden(err) {
			if o.Refused == nil {
				return fmt.Errorf("watching CertificateAuthority/%s: %w", certapiv1alpha1.CertificateAuthorityName, err)
			}
			refusals++
			wait = o.Refused(refusals, err)
		} else {
			failures++
			wait = o.Backoff(failures)
			if err != nil && o.Failed != nil {
				o.Failed(err, wait)
			}
		}
		if !sleep(ctx, o.Clock, wait) {
			return ctx.Err()
		}
	}
}

// handlerError carries the handler's own error out of consume, to tell it from a watch failure.
type handlerError struct{ err error }

func (e handlerError) Error() string { return e.err.Error() }

// consume hands the watch's objects to handle until handle is done or fails, the watch ends (nil) or
// reports an error event, or ctx ends.
func consume(ctx context.Context, w watch.Interface, handle Handler) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				ca, ok := ev.Object.(*certapiv1alpha1.CertificateAuthority)
				if !ok || ca.Name != certapiv1alpha1.CertificateAuthorityName {
					continue
				}
				done, err := handle(ca)
				if err != nil {
					return false, handlerError{err}
				}
				if done {
					return true, nil
				}
			case watch.Error:
				return false, apierrors.FromObject(ev.Object)
			}
		}
	}
}

func (o *Options) defaults() {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.HealthyAfter <= 0 {
		o.HealthyAfter = 30 * time.Second
	}
	if o.Backoff == nil {
		o.Backoff = func(n int) time.Duration { return Doubling(500*time.Millisecond, 30*time.Second, n) }
	}
}

// Doubling is an exponential backoff as a function of the failures in a row: the wait after the n-th
// (n >= 1) is initial doubled n-1 times, at most most. The loops that follow the CA and renew
// certificates take their waits from it, on the clock they are given (a fake one in tests).
func Doubling(initial, most time.Duration, n int) time.Duration {
	d := initial
	for i := 1; i < n && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}

// sleep waits d on clk; false when ctx ended first.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
