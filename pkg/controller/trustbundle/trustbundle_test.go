package trustbundle

import (
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

func TestDecide(t *testing.T) {
	now := metav1.NewTime(time.Now())
	bundle := func(s string) *certificatesv1.ClusterTrustBundle {
		return &certificatesv1.ClusterTrustBundle{ObjectMeta: metav1.ObjectMeta{Name: Name}, Spec: certificatesv1.ClusterTrustBundleSpec{TrustBundle: s}}
	}
	deleting := bundle("old")
	deleting.DeletionTimestamp = &now
	for _, c := range []struct {
		name string
		cur  *certificatesv1.ClusterTrustBundle
		want Action
	}{
		{"missing", nil, ActionCreate},
		{"holds it", bundle("pem"), ActionNone},
		{"another bundle", bundle("old"), ActionUpdate},
		{"being deleted", deleting, ActionWait},
	} {
		if got := Decide(c.cur, "pem"); got != c.want {
			t.Errorf("%s: Decide = %s; want %s", c.name, got, c.want)
		}
	}
}

// TestCanonical: the bundle is written in the injector's canonical form, so that a Source that gives the
// same certificates in other bytes (duplicates, text between blocks) does not cause a write.
func TestCanonical(t *testing.T) {
	ca := signertest.NewCA(t, time.Now(), 0)
	pem := signer.EncodeBundle(ca.Certificate)
	messy := append(append([]byte("a comment\n"), pem...), pem...)
	got, err := canonical(messy)
	if err != nil || got != string(pem) {
		t.Errorf("canonical = %q, %v; want the one certificate", got, err)
	}
	if _, err := canonical([]byte("not PEM")); err == nil {
		t.Error("canonical accepted a bundle without a certificate")
	}
}

// TestSameCertificates: the summary counts a ClusterTrustBundle holding the current CAs in another
// order (the switch made Next Active) as up to date, and one missing or adding a CA as not.
func TestSameCertificates(t *testing.T) {
	mk := func() []byte {
		ca := signertest.NewCA(t, time.Now(), 0)
		return signer.EncodeBundle(ca.Certificate)
	}
	a, b, c := mk(), mk(), mk()
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		x, y []byte
		want bool
	}{
		{"same order", cat(a, b), cat(a, b), true},
		{"reordered at the switch", cat(a, b), cat(b, a), true},
		{"a duplicate", cat(a, b, a), cat(b, a), true},
		{"one CA more", cat(a, b), cat(a, b, c), false},
		{"another CA", cat(a, b), cat(a, c), false},
		{"does not parse", []byte("nope"), cat(a), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := sameCertificates(tc.x, tc.y); got != tc.want {
				t.Errorf("sameCertificates = %v, want %v", got, tc.want)
			}
		})
	}
}
