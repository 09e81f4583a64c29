// Package controller is the runtime of certapi's leader-only loops: one Context per leadership term
// (shared clients, informer factories and event recorder) and one worker loop (Queue) that every
// controller runs its sync function on. The controllers themselves live in the subpackages.
package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Result says when a synced key is to be looked at again.
type Result struct {
	// After, when positive, queues the key again after that long: a renewal time, a deadline, a backoff
	// of the controller's own (for example after a conflict it reported).
	After time.Duration
}

// SyncFunc brings one key up to date. An error retries the key with the queue's per-key exponential
// backoff; a nil error forgets that backoff.
type SyncFunc[K comparable] func(ctx context.Context, key K) (Result, error)

// QueueOptions configure a Queue.
type QueueOptions[K comparable] struct {
	// Name names the queue in its metrics and the log.
	Name string
	// Workers is how many keys are synced at once; at least one.
	Workers int
	// Sync is the controller's sync function. Required.
	Sync SyncFunc[K]
	// BackoffBase and BackoffMax bound the per-key retry backoff after errors; 500ms and 5m when zero.
	BackoffBase, BackoffMax time.Duration
	// Clock drives delayed adds; the real clock when nil (tests pass a fake one).
	Clock clock.WithTicker
	// Quiet, when set, says which errors are expected and logged at V(2) instead of as errors (a
	// resourceVersion conflict the retry resolves, say).
	Quiet func(error) bool
}

// Queue is a rate-limited work queue with its workers: the one worker loop every certapi controller
// uses. Keys are deduplicated while queued, and a key is never synced by two workers at once.
type Queue[K comparable] struct {
	name    string
	workers int
	sync    SyncFunc[K]
	quiet   func(error) bool
	queue   workqueue.TypedRateLimitingInterface[K]
	ran     atomic.Bool
}

// NewQueue makes a Queue; nothing runs until Run.
func NewQueue[K comparable](o QueueOptions[K]) *Queue[K] {
	if o.Workers < 1 {
		o.Workers = 1
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = 500 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 5 * time.Minute
	}
	cfg := workqueue.TypedRateLimitingQueueConfig[K]{Name: o.Name}
	if o.Clock != nil {
		cfg.Clock = o.Clock
	}
	return &Queue[K]{
		name:    o.Name,
		workers: o.Workers,
		sync:    o.Sync,
		quiet:   o.Quiet,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[K](o.BackoffBase, o.BackoffMax), cfg),
	}
}

// Add queues key now.
func (q *Queue[K]) Add(key K) { q.queue.Add(key) }

// AddAfter queues key after d.
func (q *Queue[K]) AddAfter(key K, d time.Duration) { q.queue.AddAfter(key, d) }

// Len is the number of keys waiting (not counting delayed ones).
func (q *Queue[K]) Len() int { return q.queue.Len() }

// Run syncs queued keys with the configured number of workers until ctx ends, then shuts the queue down
// and returns once every worker has finished its current key. A queue runs once: a second Run, or a Run
// after ShutDown, is refused, so a controller whose run is its queue cannot run in two terms.
func (q *Queue[K]) Run(ctx context.Context) error {
	if !q.ran.CompareAndSwap(false, true) || q.queue.ShuttingDown() {
		return fmt.Errorf("queue %s: Run called twice, or after ShutDown; make a new controller for each leadership term", q.name)
	}
	logger := klog.FromContext(ctx)
	var wg sync.WaitGroup
	for range q.workers {
		wg.Go(func() {
			for q.processNext(ctx, logger) {
			}
		})
	}
	<-ctx.Done()
	q.queue.ShutDown()
	wg.Wait()
	return nil
}

// ShutDown stops the queue without Run, for a controller whose term ended before it ran (see Stopper).
func (q *Queue[K]) ShutDown() { q.queue.ShutDown() }

func (q *Queue[K]) processNext(ctx context.Context, logger klog.Logger) bool {
	key, quit := q.queue.Get()
	if quit {
		return false
	}
	defer q.queue.Done(key)
	res, err := q.sync(ctx, key)
	if err != nil {
		if ctx.Err() != nil {
			return true // the term is ending; the next leader starts afresh
		}
		if q.quiet != nil && q.quiet(err) {
			logger.V(2).Info("Retrying", "queue", q.name, "key", key, "err", err)
		} else {
			logger.Error(err, "Sync failed; retrying with backoff", "queue", q.name, "key", key)
		}
		q.queue.AddRateLimited(key)
		return true
	}
	q.queue.Forget(key)
	if res.After > 0 {
		q.queue.AddAfter(key, res.After)
	}
	return true
}

// NumRequeues is how many times in a row key has been retried after an error.
func (q *Queue[K]) NumRequeues(key K) int { return q.queue.NumRequeues(key) }
