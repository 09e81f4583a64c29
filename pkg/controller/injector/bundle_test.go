package injector

import (
	"bytes"
	"testing"

	"github.com/certapi/certapi/pkg/signer/signertest"
)

func TestCanonicalBundle(t *testing.T) {
	a, b := signertest.Bundle(t, 1), signertest.Bundle(t, 1)
	i := &Injector{bundleCache: map[digest]canonicalBundle{}}
	ab := append(append([]byte{}, a...), b...)
	// Comments, blank lines and a duplicate do not change the canonical bytes.
	messy := append(append(append([]byte("# trust bundle\n\n"), a...), []byte("\n# next\n")...), append(append([]byte{}, b...), a...)...)
	c1, c2 := i.canonical(ab), i.canonical(messy)
	if c1.err != nil || c2.err != nil {
		t.Fatalf("errors: %v, %v", c1.err, c2.err)
	}
	if !bytes.Equal(c1.pem, ab) || !bytes.Equal(c2.pem, ab) || c1.digest != c2.digest {
		t.Errorf("canonical forms differ:\n%s\n%s", c1.pem, c2.pem)
	}
	if c := i.canonical([]byte("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")); c.err == nil {
		t.Error("a damaged bundle was accepted")
	}
}
