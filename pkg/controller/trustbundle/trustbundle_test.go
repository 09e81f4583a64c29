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
