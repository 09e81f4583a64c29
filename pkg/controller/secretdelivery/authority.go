package secretdelivery

import (
	"bytes"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
)

// onAuthority is the Authority's listener: a new signing CA or bundle re-examines every delivered
// Secret; signing that resumed (leadership, a loaded CA, a renewed lease) retries the requests that
// waited for it.
func (c *Controller) onAuthority() {
	if c.authorityChanged() {
		n := c.enqueueAll()
		c.logger().Info("CA bundle or signing CA changed; re-examining every delivered Secret", "requests", n)
		return
	}
	c.enqueueNotSigning()
}

// logger is Run's logger, for the Authority's listener, which has no context of its own. A change the
// Authority announces before Run began (between the term adding its listeners and running its
// controllers) still enqueues every request; only its log line is dropped.
func (c *Controller) logger() logr.Logger {
	if l := c.log.Load(); l != nil {
		return *l
	}
	return logr.Discard()
}

// authorityChanged records the Authority's signing CA and bundle and reports whether either differs
// from what was recorded before (the first call only sets the baseline).
func (c *Controller) authorityChanged() bool {
	ca, bundle, ok := c.authority.Signing()
	if !ok || ca == nil || ca.Certificate == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := c.seenCA != nil && (!bytes.Equal(bundle, c.seenBundle) || !bytes.Equal(ca.Certificate.Raw, c.seenCA))
	c.seenCA, c.seenBundle = ca.Certificate.Raw, bundle
	return changed
}

// waitForSigning remembers that key was looked at while the Authority could not sign. The Authority
// tells its listeners when signing resumes (leadership, a loaded CA, a renewed lease); should that have
// happened between the caller's look and now, the requests are enqueued at once.
func (c *Controller) waitForSigning(key types.NamespacedName) {
	c.mu.Lock()
	c.notSigning[key] = struct{}{}
	c.mu.Unlock()
	if ca, _, ok := c.authority.Signing(); ok && ca != nil {
		c.enqueueNotSigning()
	}
}

// enqueueNotSigning enqueues the requests that waited for the Authority to sign, if it signs now.
func (c *Controller) enqueueNotSigning() {
	if ca, _, ok := c.authority.Signing(); !ok || ca == nil {
		return
	}
	c.mu.Lock()
	keys := c.notSigning
	c.notSigning = map[types.NamespacedName]struct{}{}
	c.mu.Unlock()
	for k := range keys {
		c.queue.Add(k)
	}
}
