package signer

import (
	"crypto"
	"errors"
	"fmt"
	"time"
)

// PendingCA is a CA key waiting for its certificate: certapi made the key and a certificate request
// (IntermediateRequest) for an organisation's CA to sign, and nothing signs with the key until the
// signed certificate is imported (ImportNext). It is the state between "the next CA is due" and "the
// next CA is published" of a CA that is an intermediate of an organisation's root.
type PendingCA struct {
	// Key is the CA key the request was made with. Like every CA key, it never leaves the CA record.
	Key crypto.Signer
	// RequestPEM is the PEM PKCS#10 certificate request, public.
	RequestPEM []byte
	// CreatedAt is when the request was made.
	CreatedAt time.Time
	// Reason says why it was made (see the PendingReason values).
	Reason PendingReason
}

// PendingReason says why a certificate request was made.
type PendingReason string

// The reasons a certificate request is made.
const (
	// PendingSelfSigned: the Active CA is self-signed (the first start of a CA that is to be an
	// intermediate, or an emergency CA made by a distrust) and is to be replaced by one the
	// organisation's CA signs.
	PendingSelfSigned PendingReason = "ReplaceSelfSigned"
	// PendingRotation: the Active CA reached the point where a rotation begins (a third of its chain's
	// life left).
	PendingRotation PendingReason = "Rotation"
	// PendingForceRotation: spec.forceRotation asked for a rotation.
	PendingForceRotation PendingReason = "ForceRotation"
)

// ErrNoPendingRequest means a CA certificate was given for import while no certificate request waits
// for one.
var ErrNoPendingRequest = errors.New("no CA certificate request is waiting for a signature")

// ImportNext returns the Authorities with ca, which an organisation's CA signed for the pending
// request (CheckIntermediate made it with Pending.Key), as the Next CA, published at now: from there
// the rotation goes on as for a CA certapi made (the gate, the grace period, the switch). It never
// mutates a. It refuses when no request is pending (ErrNoPendingRequest), when a Next CA is published
// already, or when ca's key is not the pending one.
func (a Authorities) ImportNext(ca *CA, now time.Time) (Authorities, error) {
	if a.Pending == nil {
		return a, ErrNoPendingRequest
	}
	if a.Next != nil {
		return a, fmt.Errorf("the Next CA %s is published already; a CA certificate is imported only while no Next CA is", FormatSerialNumber(a.Next.Certificate.SerialNumber))
	}
	if ca == nil || ca.Key == nil || ca.Certificate == nil {
		return a, errors.New("no CA to import")
	}
	pub, ok := a.Pending.Key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(ca.Certificate.PublicKey) {
		return a, errors.New("the CA certificate is not for the key of the pending certificate request")
	}
	out := a
	out.Next, out.NextPublished, out.Pending = ca, now, nil
	out.LastStepAt = now
	return out, nil
}

// Waiting says, for a pending request at now, how long it has waited and how long the Active CA's
// chain has left (negative once it has expired). Zero values when nothing is pending.
func (a Authorities) Waiting(now time.Time) (waited, activeLeft time.Duration) {
	if a.Pending == nil || a.Active == nil {
		return 0, 0
	}
	return now.Sub(a.Pending.CreatedAt), a.Active.ChainNotAfter().Sub(now)
}

// SubjectKeyID returns the subject key identifier of the pending key in the form status shows (as
// CA.SubjectKeyID): the certificate imported for it must carry the same key.
func (p *PendingCA) SubjectKeyID() string {
	id, err := subjectKeyID(p.Key.Public())
	if err != nil {
		return ""
	}
	return FormatKeyID(id)
}

// Name is the name of the request in the Kubernetes API (the CertificateSigningRequest certapi makes for
// it with --ca-upstream=CertificateSigningRequest): "certapi-ca-" and the first eight bytes of the key's
// subject key identifier in lower-case hex. It is the same for every leader, so a new leader finds the
// request its predecessor made.
func (p *PendingCA) Name() string {
	id, err := subjectKeyID(p.Key.Public())
	if err != nil || len(id) < 8 {
		return "certapi-ca-request"
	}
	return fmt.Sprintf("certapi-ca-%x", id[:8])
}
