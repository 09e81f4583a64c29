package issuer

import (
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// TestRecordKeepsTheDistrust: the stored record keeps which CAs are distrusted and since when, which the
// distrust deadline counts from after a restart or a new leader.
func TestRecordKeepsTheDistrust(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	mk := func() *signer.CA {
		ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local", Duration: 8760 * time.Hour, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	a := signer.Authorities{Active: mk(), Distrust: "leak", SwitchedAt: now, ForcedSwitch: true,
		Retiring: []signer.Retiring{{CA: mk(), Until: now.Add(time.Hour)}, {CA: mk(), Distrusted: true, DistrustedAt: now.Add(time.Minute)}}}
	rec, err := encodeRecord(a)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Retiring) != 2 || !got.Retiring[0].Until.Equal(now.Add(time.Hour)) || got.Retiring[0].Distrusted ||
		!got.Retiring[1].Distrusted || !got.Retiring[1].DistrustedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("Retiring after a round trip: %+v", got.Retiring)
	}
	if got.Distrust != "leak" || !got.SwitchedAt.Equal(now) {
		t.Errorf("distrust %q, switched at %s", got.Distrust, got.SwitchedAt)
	}
}
