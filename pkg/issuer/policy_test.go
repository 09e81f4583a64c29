package issuer

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// TestPolicySignPCR: on the PodCertificateRequest path a leaf is backdated by PCRBackdate only (kube-apiserver
// wants notBefore within 5 minutes of its clock) and its whole validity, backdate included, stays within
// MaxLifetime (spec.maxExpirationSeconds); the other paths keep signer.Backdate.
func TestPolicySignPCR(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	ca := signertest.NewCA(t, now.Add(-time.Hour), 0)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := Policy{ClusterDomain: "cluster.local"}
	base := Request{Namespace: "ns", Name: "web", ServiceName: "web", Duration: 168 * time.Hour, PublicKey: key.Public()}
	for _, c := range []struct {
		name         string
		path         string
		maxLifetime  time.Duration
		wantBackdate time.Duration
		wantValidity time.Duration
	}{
		{"pcr capped by maxExpirationSeconds", PathPCR, 24 * time.Hour, PCRBackdate, 24 * time.Hour},
		{"pcr at the shortest maxExpirationSeconds", PathPCR, time.Hour, PCRBackdate, time.Hour},
		{"pcr shorter than its cap", PathPCR, 2160 * time.Hour, PCRBackdate, 168*time.Hour + PCRBackdate},
		{"servingcerts", PathServingCerts, 0, signer.Backdate, 168*time.Hour + signer.Backdate},
	} {
		t.Run(c.name, func(t *testing.T) {
			req := base
			req.Path, req.MaxLifetime = c.path, c.maxLifetime
			res, err := p.Sign(ca, nil, req, now)
			if err != nil {
				t.Fatal(err)
			}
			if got := now.Sub(res.NotBefore); got != c.wantBackdate {
				t.Errorf("backdate %s; want %s", got, c.wantBackdate)
			}
			if got := res.NotAfter.Sub(res.NotBefore); got != c.wantValidity {
				t.Errorf("validity %s; want %s", got, c.wantValidity)
			}
		})
	}
}
