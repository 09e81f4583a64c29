package injector

import (
	"github.com/certapi/certapi/pkg/signer"
)

// canonicalBundle is a bundle as the injector writes it.
type canonicalBundle struct {
	pem    []byte
	digest digest
	err    error
}

// currentBundle returns the Source's bundle, canonical, with its digest; nil when there is none.
func (i *Injector) currentBundle() ([]byte, digest, error) {
	raw, ok := i.source.Bundle()
	if !ok || len(raw) == 0 {
		return nil, digest{}, nil
	}
	c := i.canonical(raw)
	return c.pem, c.digest, c.err
}

// canonical parses a PEM bundle and re-encodes it with signer.EncodeBundle (deduplicated, in order).
// A bundle that does not parse is an error: writing it would break every target at once.
func (i *Injector) canonical(raw []byte) canonicalBundle {
	in := digestOf(raw)
	i.bundleMu.Lock()
	defer i.bundleMu.Unlock()
	if c, ok := i.bundleCache[in]; ok {
		return c
	}
	var c canonicalBundle
	certs, err := signer.ParseBundle(raw)
	if err != nil {
		c.err = err
	} else {
		c.pem = signer.EncodeBundle(certs...)
		c.digest = digestOf(c.pem)
	}
	if len(i.bundleCache) >= 8 {
		clear(i.bundleCache)
	}
	i.bundleCache[in] = c
	return c
}
