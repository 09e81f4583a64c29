package injector

import "github.com/certapi/certapi/pkg/cabundle"

// canonicalBundle is a bundle as the injector writes it (cabundle.Canonical), or why it cannot be.
type canonicalBundle struct {
	pem    []byte
	digest digest
	// certs is the digest of the bundle's certificates as a set (cabundle.Bundle.Set): a target holding
	// the same CAs in another order trusts exactly the same CAs.
	certs digest
	err   error
}

// currentBundle returns the Source's bundle, canonical, with its digest; nil when there is none.
func (i *Injector) currentBundle() ([]byte, digest, error) {
	c := i.currentCanonical()
	return c.pem, c.digest, c.err
}

// currentCanonical returns the Source's bundle, canonical; its pem is nil when there is none.
func (i *Injector) currentCanonical() canonicalBundle {
	raw, ok := i.source.Bundle()
	if !ok || len(raw) == 0 {
		return canonicalBundle{}
	}
	return i.canonical(raw)
}

// canonical is raw as cabundle.Canonical makes it, remembered for the last few bundles (every sync asks
// for the current one). A bundle that does not parse is an error: writing it would break every target
// at once.
func (i *Injector) canonical(raw []byte) canonicalBundle {
	in := digestOf(raw)
	i.bundleMu.Lock()
	defer i.bundleMu.Unlock()
	if c, ok := i.bundleCache[in]; ok {
		return c
	}
	var c canonicalBundle
	if b, err := cabundle.Canonical(raw); err != nil {
		c.err = err
	} else {
		c.pem, c.digest, c.certs = b.PEM, b.Digest, b.Set
	}
	if len(i.bundleCache) >= 8 {
		clear(i.bundleCache)
	}
	i.bundleCache[in] = c
	return c
}
