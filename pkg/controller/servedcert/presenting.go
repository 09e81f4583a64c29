package servedcert

import (
	"crypto/x509"
	"slices"
	"strings"
	"time"

	"github.com/certapi/certapi/pkg/servedcert"
)

// UrgentInterval is how often an endpoint that presents a certificate of a CA being removed (Expedite)
// is probed again: a pending distrust waits for it to reload its re-issued certificate, and should see
// that within seconds, not an interval later.
const UrgentInterval = 10 * time.Second

// PresentedEndpoint is an endpoint whose last probe presented a leaf that one of the CAs asked about
// signed.
type PresentedEndpoint struct {
	// Name is the endpoint as status names it (EndpointName).
	Name string
	// State is what kube-apiserver would make of it against the bundle certapi injects now.
	State servedcert.State
}

// Presenting returns the endpoints whose last probe presented a leaf that one of cas signed, sorted by
// name, and whether the check has a view at all (false before its first publication of the term:
// nothing is known of any endpoint yet). Endpoints not probed yet are not listed.
func (c *Controller) Presenting(cas []*x509.Certificate) ([]PresentedEndpoint, bool) {
	now := c.o.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.summary == nil || len(cas) == 0 {
		return nil, c.summary != nil
	}
	seen := map[string]bool{}
	var out []PresentedEndpoint
	for t, st := range c.targets {
		server := t.Service.ServerName()
		for _, a := range st.addrs {
			ps := c.probes[probeKey{Addr: a, ServerName: server}]
			if ps == nil || !ps.probed || !signedByOneOf(ps.chain, cas) {
				continue
			}
			name := EndpointName(t, a)
			if seen[name] {
				continue
			}
			seen[name] = true
			out = append(out, PresentedEndpoint{Name: name, State: servedcert.Classify(ps.chain, c.bundleOf(t), server, now, 0).State})
		}
	}
	slices.SortFunc(out, func(a, b PresentedEndpoint) int { return strings.Compare(a.Name, b.Name) })
	return out, true
}

// Expedite makes every endpoint that presents a leaf one of cas signed probed again every
// UrgentInterval instead of the interval, until it presents another; nil or empty cas ends that. The
// rotation calls it while a distrust is pending, with the distrusted CAs.
func (c *Controller) Expedite(cas []*x509.Certificate) {
	c.mu.Lock()
	if slices.EqualFunc(cas, c.urgent, func(a, b *x509.Certificate) bool { return a.Equal(b) }) {
		c.mu.Unlock()
		return
	}
	c.urgent = slices.Clone(cas)
	var soon []probeKey
	for k, ps := range c.probes {
		if ps.probed && signedByOneOf(ps.chain, cas) {
			ps.forced = true
			soon = append(soon, k)
		}
	}
	c.mu.Unlock()
	for _, k := range soon {
		c.queue.AddAfter(key{job: jobProbe, probe: k}, UrgentInterval)
	}
}

// signedByOneOf reports whether the leaf of chain was signed by one of cas.
func signedByOneOf(chain []*x509.Certificate, cas []*x509.Certificate) bool {
	if len(chain) == 0 || chain[0] == nil {
		return false
	}
	for _, ca := range cas {
		if chain[0].CheckSignatureFrom(ca) == nil {
			return true
		}
	}
	return false
}
