package signer

import (
	"testing"
	"time"
)

// benchmarkSign measures one leaf signature by an ECDSA P-256 CA for a
// pre-made key of the given kind: what one servingcerts create costs the
// signer.
func benchmarkSign(b *testing.B, kind string) {
	ca := newTestCA(b, time.Time{}, 0)
	req := LeafRequest{
		ServiceName: "webhook", Namespace: "team-a", ClusterDomain: "cluster.local",
		PublicKey: testKey(b, kind).Public(), Duration: 168 * time.Hour,
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ca.Sign(req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSignECDSAP256(b *testing.B) { benchmarkSign(b, string(ECDSAP256)) }

func BenchmarkSignRSA2048(b *testing.B) { benchmarkSign(b, string(RSA2048)) }

// BenchmarkParseCSR measures parsing and checking a P-256 request,
// including its signature verification.
func BenchmarkParseCSR(b *testing.B) {
	in := csrPEM(b, testKey(b, string(ECDSAP256)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseCSR(in); err != nil {
			b.Fatal(err)
		}
	}
}
