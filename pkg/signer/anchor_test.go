package signer

import (
	"crypto/x509"
	"slices"
	"strings"
	"testing"
)

func TestBundleFor(t *testing.T) {
	key := testKey(t, string(ECDSAP256))
	nextKey := testKey(t, string(ECDSAP384))
	r1 := newTestRoot(t, "Root 1", "P256", nil)
	org := r1.subCA(t, "Org", nil)
	r2 := newTestRoot(t, "Root 2", "P256", nil)
	active, _ := mustImport(t, org.signCSR(t, intermediateCSR(t, key), nil), []*x509.Certificate{org.cert, r1.cert}, key, importOpts())
	next, _ := mustImport(t, r1.signCSR(t, intermediateCSR(t, nextKey), nil), []*x509.Certificate{r1.cert}, nextKey, importOpts())
	oldUnderR2, _ := mustImport(t, r2.signCSR(t, intermediateCSR(t, key), nil), []*x509.Certificate{r2.cert}, key, importOpts())
	selfSigned := newTestCA(t, testNow, 0)

	a := Authorities{
		Active: active, Next: next,
		Retiring: []Retiring{{CA: selfSigned.WithoutKey()}, {CA: oldUnderR2.WithoutKey()}, {CA: active.WithoutKey()}},
	}
	tests := []struct {
		anchor BundleAnchor
		want   []*x509.Certificate
	}{
		// One root for Active and Next, placed where Active is; then the self-signed CA; then the other root.
		{anchor: AnchorRoot, want: []*x509.Certificate{r1.cert, selfSigned.Certificate, r2.cert}},
		{anchor: "", want: []*x509.Certificate{r1.cert, selfSigned.Certificate, r2.cert}},
		// Each of certapi's own CA certificates, never the organisation's.
		{anchor: AnchorIntermediate, want: []*x509.Certificate{active.Certificate, next.Certificate, selfSigned.Certificate, oldUnderR2.Certificate}},
	}
	for _, tt := range tests {
		t.Run(string(tt.anchor), func(t *testing.T) {
			got := a.CertificatesFor(tt.anchor)
			if !slices.EqualFunc(got, tt.want, (*x509.Certificate).Equal) {
				t.Fatalf("CertificatesFor(%q) = %v, want %v", tt.anchor, subjects(got), subjects(tt.want))
			}
			bundle := a.BundleFor(tt.anchor)
			if string(bundle) != string(EncodeBundle(tt.want...)) || string(a.BundleFor(tt.anchor)) != string(bundle) {
				t.Fatal("BundleFor is not the byte-stable encoding of CertificatesFor")
			}
		})
	}
	if string(a.Bundle()) != string(a.BundleFor(AnchorIntermediate)) {
		t.Error("Bundle differs from BundleFor(AnchorIntermediate)")
	}
}

func subjects(certs []*x509.Certificate) []string {
	var out []string
	for _, c := range certs {
		out = append(out, c.Subject.CommonName)
	}
	return out
}

func TestParseBundleAnchor(t *testing.T) {
	for in, want := range map[string]BundleAnchor{"": AnchorRoot, "Root": AnchorRoot, "Intermediate": AnchorIntermediate} {
		if got, err := ParseBundleAnchor(in); err != nil || got != want {
			t.Errorf("ParseBundleAnchor(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"root", "Both", " Root"} {
		_, err := ParseBundleAnchor(in)
		if err == nil || !strings.Contains(err.Error(), "accepted: Root, Intermediate") {
			t.Errorf("ParseBundleAnchor(%q) error %v, want one naming the accepted values", in, err)
		}
	}
}
