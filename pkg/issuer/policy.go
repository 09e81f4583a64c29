package issuer

import (
	"crypto/x509"
	"fmt"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

func (i *Issuer) policy() Policy {
	return Policy{ClusterDomain: i.cfg.ClusterDomain, MaxCertificateDuration: i.cfg.MaxCertificateDuration}
}

// Policy is certapi's one issuance policy. Every path signs through its Sign, so that none can drift
// from another: the servingcerts subresource (on the leader or through the handoff), Secret delivery,
// and the PodCertificateRequest signer.
type Policy struct {
	// ClusterDomain gives every certificate's second SAN.
	ClusterDomain string
	// MaxCertificateDuration, when positive, caps every lifetime: a Retiring CA stays trusted this long.
	MaxCertificateDuration time.Duration
}

// Sign signs req with ca at now: the key must be of a type certapi accepts (signer.CheckPublicKey), the
// lifetime is capped by MaxCertificateDuration and by req.MaxLifetime (which counts the backdate:
// signer.Backdate, or PCRBackdate on PathPCR), and the renewal time is signer.RenewalTime rounded up to
// a whole second, as the API and the Secret annotations carry it.
func (p Policy) Sign(ca *signer.CA, bundle []byte, req Request, now time.Time) (*Result, error) {
	pub := req.PublicKey
	if pub == nil {
		var err error
		if pub, err = x509.ParsePKIXPublicKey(req.PublicKeyPKIX); err != nil {
			return nil, fmt.Errorf("parsing the public key: %w", err)
		}
	}
	if err := signer.CheckPublicKey(pub); err != nil {
		return nil, err
	}
	if max := p.MaxCertificateDuration; max > 0 && req.Duration > max {
		req.Duration = max
	}
	backdate := signer.Backdate
	if req.Path == PathPCR {
		backdate = PCRBackdate
	}
	if req.MaxLifetime > 0 && req.Duration > req.MaxLifetime-backdate {
		req.Duration = req.MaxLifetime - backdate
	}
	leaf, err := ca.SignPEM(signer.LeafRequest{
		ServiceName:   req.ServiceName,
		Namespace:     req.Namespace,
		ClusterDomain: p.ClusterDomain,
		DNSNames:      req.DNSNames,
		PublicKey:     pub,
		Duration:      req.Duration,
		Backdate:      backdate,
		Now:           now,
	})
	if err != nil {
		return nil, fmt.Errorf("signing for %s/%s: %w", req.Namespace, req.Name, err)
	}
	var renewBefore *time.Duration
	if req.RenewBefore > 0 {
		renewBefore = &req.RenewBefore
	}
	return &Result{
		CertificatePEM: string(leaf.CertificatePEM),
		CABundle:       string(bundle),
		SerialNumber:   leaf.SerialNumber,
		NotBefore:      leaf.NotBefore,
		NotAfter:       leaf.NotAfter,
		RenewalTime:    ceilSecond(signer.RenewalTime(leaf.NotBefore, leaf.NotAfter, renewBefore, now)),
	}, nil
}

// ceilSecond rounds t up to a whole second: the API and Secret annotations carry whole seconds, and
// rounding up keeps a renewal time strictly after now, so the scheduled and the published time agree.
func ceilSecond(t time.Time) time.Time {
	r := t.Truncate(time.Second)
	if r.Before(t) {
		r = r.Add(time.Second)
	}
	return r
}
