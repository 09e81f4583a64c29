package injector

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"slices"

	"github.com/certapi/certapi/pkg/signer"
)

// canonicalBundle is a bundle as the injector writes it.
type canonicalBundle struct {
	pem    []byte
	digest digest
	// certs is the digest of the bundle's certificates as a set (their DER, sorted): the same for two
	// bundles that differ only in order. When a rotation's Next CA becomes Active the bundle's order
	// changes and nothing else, and a target holding the previous order trusts exactly the same CAs.
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

// canonical is raw as signer.CanonicalBundle makes it, with its digests; it parses the bundle itself
// because the set digest needs the certificates. A bundle that does not parse is an error: writing it
// would break every target at once.
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
		c.certs = setDigest(certs)
	}
	if len(i.bundleCache) >= 8 {
		clear(i.bundleCache)
	}
	i.bundleCache[in] = c
	return c
}

// setDigest is the digest of certs as a set: their distinct DER encodings, sorted.
func setDigest(certs []*x509.Certificate) digest {
	ders := make([][]byte, 0, len(certs))
	for _, c := range certs {
		ders = append(ders, c.Raw)
	}
	slices.SortFunc(ders, bytes.Compare)
	ders = slices.CompactFunc(ders, bytes.Equal)
	h := sha256.New()
	for _, d := range ders {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(d)))
		h.Write(n[:])
		h.Write(d)
	}
	var out digest
	h.Sum(out[:0])
	return out
}
