package requestquota

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// pendingTTL is how long an admitted create counts before the watch shows it: a create refused after
// admission (the name exists, etcd failed) stops counting then.
const pendingTTL = 30 * time.Second

// Counter counts the ServingCertRequests of each namespace from a list and watch of the server's own
// storage. It keeps their names only, never the objects, so it costs each replica a few bytes per request.
// A create it admitted counts at once, before the watch shows it, so that quick creates one after
// another on one replica cannot pass the limit; creates on different replicas within the watch's delay
// (milliseconds) can, by as many as are in flight at once.
type Counter struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	names   map[string]map[string]struct{}  // namespace -> names seen in the watch
	pending map[string]map[string]time.Time // namespace -> admitted names not yet seen, and until when they count
	synced  chan struct{}                   // closed at the first list
	once    sync.Once
}

// NewCounter returns an empty Counter; it counts once Run has listed.
func NewCounter() *Counter {
	return newCounter(clock.RealClock{})
}

func newCounter(clk clock.PassiveClock) *Counter {
	return &Counter{clock: clk, names: map[string]map[string]struct{}{}, pending: map[string]map[string]time.Time{}, synced: make(chan struct{})}
}

// Run lists and watches lw (ServingCertRequests of every namespace) until ctx ends.
func (c *Counter) Run(ctx context.Context, lw cache.ListerWatcher) {
	r := cache.NewReflectorWithOptions(lw, nil, c, cache.ReflectorOptions{Name: "servingcertrequest-counter"})
	r.RunWithContext(ctx)
}

// WaitForSync waits up to timeout, or until ctx ends, for the first list, and reports whether it came.
func (c *Counter) WaitForSync(ctx context.Context, timeout time.Duration) bool {
	select {
	case <-c.synced:
		return true
	default:
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-c.synced:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// Count returns how many requests namespace ns holds, with those admitted and not yet seen.
func (c *Counter) Count(ns string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	for name, until := range c.pending[ns] {
		if now.After(until) {
			delete(c.pending[ns], name)
		}
	}
	if len(c.pending[ns]) == 0 {
		delete(c.pending, ns)
	}
	return len(c.names[ns]) + len(c.pending[ns])
}

// Admitted counts a create of ns/name that admission let through, until the watch shows it.
func (c *Counter) Admitted(ns, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, seen := c.names[ns][name]; seen {
		return
	}
	if c.pending[ns] == nil {
		c.pending[ns] = map[string]time.Time{}
	}
	c.pending[ns][name] = c.clock.Now().Add(pendingTTL)
}

func key(obj any) (ns, name string, err error) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", "", fmt.Errorf("counting ServingCertRequests: %w", err)
	}
	return m.GetNamespace(), m.GetName(), nil
}

// Add records a request the watch shows (a cache.ReflectorStore method).
func (c *Counter) Add(obj any) error {
	ns, name, err := key(obj)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(ns, name)
	return nil
}

func (c *Counter) add(ns, name string) {
	if c.names[ns] == nil {
		c.names[ns] = map[string]struct{}{}
	}
	c.names[ns][name] = struct{}{}
	if p := c.pending[ns]; p != nil {
		delete(p, name)
		if len(p) == 0 {
			delete(c.pending, ns)
		}
	}
}

// Update is Add: a request that changed is still one request.
func (c *Counter) Update(obj any) error { return c.Add(obj) }

// Delete forgets a request.
func (c *Counter) Delete(obj any) error {
	ns, name, err := key(obj)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.names[ns]; n != nil {
		delete(n, name)
		if len(n) == 0 {
			delete(c.names, ns)
		}
	}
	return nil
}

// Replace starts over from a list.
func (c *Counter) Replace(objs []any, _ string) error {
	names := map[string]map[string]struct{}{}
	for _, obj := range objs {
		ns, name, err := key(obj)
		if err != nil {
			return err
		}
		if names[ns] == nil {
			names[ns] = map[string]struct{}{}
		}
		names[ns][name] = struct{}{}
	}
	c.mu.Lock()
	c.names = map[string]map[string]struct{}{}
	for ns, n := range names {
		for name := range n {
			c.add(ns, name)
		}
	}
	c.mu.Unlock()
	c.once.Do(func() { close(c.synced) })
	return nil
}

// Resync does nothing: there is nothing to resync.
func (c *Counter) Resync() error { return nil }
