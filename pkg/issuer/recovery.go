package issuer

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/signer"
)

// A leader that finds no CA record in etcd creates a CA. On a first start that is all; after certapi's
// etcd data was lost (no backup restored), every webhook, API server and Secret still holds a
// certificate of the lost CA, and trusting only the new one would fail them all at once. So before it
// creates the CA, the leader reads the bundles certapi had published (Config.PublishedBundles) and keeps
// the CAs of certapi's it finds there as Retiring (decideRecovery): the bundle it injects then holds the
// new CA and the old ones, which leave it as a Retiring CA does, once no certificate they signed can
// still be valid. What it did is stored with the record (Recovery), for CertificateAuthority status and
// an Event.

// PublishedBundle is a CA bundle certapi had published, read back from kube-apiserver.
type PublishedBundle struct {
	// Source names the object, for status and the log: "APIService v1alpha1.certapi.dev".
	Source string
	// PEM is the bundle the object holds.
	PEM []byte
}

// Recovery is what a leader that found no CA record did with the CAs it found in what certapi had
// published. It is stored with the CA record, so that every later leader reports it.
type Recovery struct {
	// At is when the record was created.
	At time.Time `json:"at"`
	// Kept are the CAs kept as Retiring.
	Kept []RecoveredCA `json:"kept,omitempty"`
	// Skipped are the certificates found that were not kept, each with its reason.
	Skipped []RecoveredCA `json:"skipped,omitempty"`
}

// RecoveredCA is one certificate found in a published bundle.
type RecoveredCA struct {
	// SerialNumber is the certificate's serial as status shows it; empty for a block that did not parse.
	SerialNumber string `json:"serialNumber,omitempty"`
	// Sources are the objects it was found in.
	Sources []string `json:"sources"`
	// NotAfter is the certificate's.
	NotAfter time.Time `json:"notAfter,omitzero"`
	// Until is, for a kept CA, when it leaves the bundle.
	Until time.Time `json:"until,omitzero"`
	// Reason is, for a skipped certificate, why it was not kept.
	Reason string `json:"reason,omitempty"`
}

// publishedTimeout bounds the reading of the published bundles.
const publishedTimeout = 30 * time.Second

// newAuthorities returns the CAs of a record created now, with no record stored: a new Active CA and the
// CAs of certapi's found in what it had published, as Retiring, with what was done about them (nil when
// nothing had been published).
func (i *Issuer) newAuthorities(ctx context.Context) (signer.Authorities, *Recovery, error) {
	var published []PublishedBundle
	if i.cfg.PublishedBundles != nil {
		rctx, cancel := context.WithTimeout(ctx, publishedTimeout)
		defer cancel()
		var err error
		if published, err = i.cfg.PublishedBundles(rctx); err != nil {
			return signer.Authorities{}, nil, fmt.Errorf("no CA record is stored; reading the CA bundles certapi had published, to keep trusting their CAs, before creating one: %w", err)
		}
	} else {
		klog.FromContext(ctx).Info("No CA record is stored: creating a new CA, and keeping none that certapi may have published before (--keep-published-cas is off)")
	}
	now := i.cfg.Clock.Now()
	key, err := i.newCAKey(ctx, now)
	if err != nil {
		return signer.Authorities{}, nil, fmt.Errorf("generating the CA: %w", err)
	}
	ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: i.cfg.ClusterDomain, Duration: i.cfg.CADuration, Now: now, Key: key})
	if err != nil {
		return signer.Authorities{}, nil, fmt.Errorf("generating the CA: %w", err)
	}
	retiring, rec := decideRecovery(recoveryInput{Published: published, ClusterDomain: i.cfg.ClusterDomain,
		MaxCertificateDuration: i.cfg.MaxCertificateDuration, Now: now})
	if rec != nil {
		for _, k := range rec.Kept {
			klog.FromContext(ctx).Info("No CA record is stored: keeping a CA of certapi's found in what it had published as Retiring",
				"serialNumber", k.SerialNumber, "sources", k.Sources, "until", k.Until)
		}
		for _, s := range rec.Skipped {
			klog.FromContext(ctx).Info("No CA record is stored: not keeping a certificate found in what certapi had published",
				"serialNumber", s.SerialNumber, "sources", s.Sources, "reason", s.Reason)
		}
	}
	return signer.Authorities{Active: ca, Retiring: retiring}, rec, nil
}

// Recovery returns what the leader did with the CAs it found in what certapi had published when it
// created the CA record (nil when that record was not created so, or this replica does not lead), and
// whether this replica created it in its current term.
func (i *Issuer) Recovery() (rec *Recovery, thisTerm bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	if !i.leading {
		return nil, false
	}
	return i.recovery, i.recoveredThisTerm
}
