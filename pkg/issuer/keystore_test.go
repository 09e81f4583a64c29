package issuer

import (
	"crypto/elliptic"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// TestRecordKeepsTheDistrust: the stored record keeps which CAs are distrusted and since when, which the
// distrust deadline counts from after a restart or a new leader.
func TestRecordKeepsTheDistrust(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() *signer.CA {
		return signertest.NewCA(t, now, 8760*time.Hour)
	}
	a := signer.Authorities{Active: mk(), Distrust: "leak", SwitchedAt: now, ForcedSwitch: true,
		Retiring: []signer.Retiring{{CA: mk(), Until: now.Add(time.Hour)}, {CA: mk(), Distrusted: true, DistrustedAt: now.Add(time.Minute)}}}
	rec, err := encodeRecord(a)
	if err != nil {
		t.Fatal(err)
	}
	got, keysToDrop, err := decodeRecord(rec, noHSM)
	if err != nil || keysToDrop {
		t.Fatalf("decoding: %v, keys to drop %v", err, keysToDrop)
	}
	if len(got.Retiring) != 2 || !got.Retiring[0].Until.Equal(now.Add(time.Hour)) || got.Retiring[0].Distrusted ||
		!got.Retiring[1].Distrusted || !got.Retiring[1].DistrustedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("Retiring after a round trip: %+v", got.Retiring)
	}
	if got.Distrust != "leak" || !got.SwitchedAt.Equal(now) {
		t.Errorf("distrust %q, switched at %s", got.Distrust, got.SwitchedAt)
	}
}

// TestRecordHoldsNoRetiringKey: only the CAs that sign or will sign (Active, Next) have their key in the
// record; a record written before that, with a Retiring CA's key, loads without it and asks for a
// rewrite.
func TestRecordHoldsNoRetiringKey(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() *signer.CA {
		return signertest.NewCA(t, now, 8760*time.Hour)
	}
	active, next, retiring := mk(), mk(), mk()
	for _, tc := range []struct {
		name string
		// retiringCA is the Retiring CA as the Authorities hold it: with its key (a state read from an
		// old record) or without.
		retiringCA *signer.CA
	}{
		{"Retiring CA without its key", retiring.WithoutKey()},
		{"Retiring CA still holding its key in memory", retiring},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := signer.Authorities{Active: active, Next: next, Retiring: []signer.Retiring{{CA: tc.retiringCA, Until: now.Add(time.Hour)}}}
			rec, err := encodeRecord(a)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rec.Authorities {
				if hasKey := e.KeyPEM != ""; hasKey != (e.Role != RoleRetiring) {
					t.Errorf("%s entry: key stored %v", e.Role, hasKey)
				}
			}
			got, keysToDrop, err := decodeRecord(rec, noHSM)
			if err != nil || keysToDrop {
				t.Fatalf("decoding: %v, keys to drop %v", err, keysToDrop)
			}
			if got.Active.Key == nil || got.Next.Key == nil || got.Retiring[0].CA.Key != nil {
				t.Error("after a round trip: want keys for Active and Next only")
			}
		})
	}
	// A record of an older certapi: the Retiring entry has its key.
	rec, err := encodeRecord(signer.Authorities{Active: active, Retiring: []signer.Retiring{{CA: retiring.WithoutKey(), Until: now.Add(time.Hour)}}})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := retiring.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	rec.Authorities[1].KeyPEM = string(keyPEM)
	got, keysToDrop, err := decodeRecord(rec, noHSM)
	if err != nil || !keysToDrop || got.Retiring[0].CA.Key != nil {
		t.Fatalf("old record: %v, keys to drop %v, Retiring key loaded %v; want it flagged for a rewrite and not loaded", err, keysToDrop, got.Retiring[0].CA.Key != nil)
	}
}

// TestRecordKeepsChainAndPending: an imported CA keeps its chain through the record (leaves are served
// with it, bundles anchored on its root), and a pending certificate request keeps its key, request,
// time and reason.
func TestRecordKeepsChainAndPending(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	root := signertest.NewRoot(t, "Example Root", now)
	key := signertest.ECKey(t, elliptic.P256())
	csr, err := signer.IntermediateRequest(key, signer.IntermediateOptions{ClusterDomain: signertest.ClusterDomain, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ca, _, err := signer.CheckIntermediate(root.Sign(t, csr, now, signertest.SignOptions{}), root.PEM(), key,
		signer.ImportOptions{ClusterDomain: signertest.ClusterDomain, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	pendingKey := signertest.ECKey(t, elliptic.P256())
	a := signer.Authorities{Active: ca, Pending: &signer.PendingCA{Key: pendingKey, RequestPEM: []byte("request"), CreatedAt: now, Reason: signer.PendingRotation}}
	rec, err := encodeRecord(a)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := decodeRecord(rec, noHSM)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Active.Chain) != 1 || !got.Active.Chain[0].Equal(root.Certificate) {
		t.Fatalf("chain after a round trip: %d certificates", len(got.Active.Chain))
	}
	if string(got.BundleFor(signer.AnchorRoot)) != string(root.PEM()) {
		t.Error("the root-anchored bundle after a round trip is not the root")
	}
	p := got.Pending
	if p == nil || !pendingKey.PublicKey.Equal(p.Key.Public()) || string(p.RequestPEM) != "request" || !p.CreatedAt.Equal(now) || p.Reason != signer.PendingRotation {
		t.Fatalf("pending after a round trip: %+v", p)
	}
}
