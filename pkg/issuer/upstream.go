package issuer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/signer"
)

// Upstream configures a CA that is an intermediate of an organisation's CA, signed by hand or by a
// certificates.k8s.io signer (package upstreamcsr makes the CertificateSigningRequest and calls Import): the leader
// makes each next CA's key and a certificate request (signer.IntermediateRequest), publishes the
// request (CertificateAuthority status), and the operator imports the certificate the organisation's CA
// signed (Import; the API's certificateauthorities/import subresource). Until the first import the
// Active CA is a self-signed one: certapi must serve its own API (through which the import comes, and
// which kube-apiserver reaches only through an injected bundle) before anyone signs for it.
type Upstream struct {
	// RootsPEM, when set, holds the organisation's roots (PEM): an imported certificate's chain must lead
	// to one of them. Empty: the chain given with the import must end with a self-signed root, which
	// the importer vouches for (signer.ImportOptions.RootsPEM).
	RootsPEM []byte
	// MinRemaining is the least time an imported certificate and its chain must still be valid;
	// signer.DefaultMinRemaining when zero.
	MinRemaining time.Duration
	// AcceptWiderConstraints imports a certificate whose name constraints are missing or wider than
	// certapi's own, with warnings, instead of refusing it.
	AcceptWiderConstraints bool
	// Organization, when set, is the subject organization the requests ask for.
	Organization string
}

// ImportRequest is a signed CA certificate to import, as the API takes it.
type ImportRequest struct {
	// CertificatePEM is the certificate the organisation's CA signed for the pending request, optionally
	// followed by its chain.
	CertificatePEM string `json:"certificate"`
	// ChainPEM is more of the chain: intermediates, and optionally the root.
	ChainPEM string `json:"chain,omitempty"`
	// DryRun checks and stores nothing.
	DryRun bool `json:"dryRun,omitempty"`
}

// ImportResult is what an import stored (or, with DryRun, would have).
type ImportResult struct {
	// Role is the role the imported CA took: Next (it signs once the rotation gate opens).
	Role          string    `json:"role"`
	SerialNumber  string    `json:"serialNumber"`
	SubjectKeyID  string    `json:"subjectKeyID"`
	NotBefore     time.Time `json:"notBefore"`
	NotAfter      time.Time `json:"notAfter"`
	ChainNotAfter time.Time `json:"chainNotAfter"`
	// Root names the trust anchor the chain was verified to, by subject and serial.
	Root     string           `json:"root"`
	Warnings []signer.Finding `json:"warnings,omitempty"`
}

// ErrUpstreamOff means a CA certificate was given for import while certapi is not configured as an
// intermediate of an organisation's CA.
var ErrUpstreamOff = errors.New("certapi is not configured as an intermediate of an organisation's CA (--ca-upstream=Manual or CertificateSigningRequest); nothing waits for an import")

// newRequest makes a CA key and its certificate request.
func (i *Issuer) newRequest(ctx context.Context, reason signer.PendingReason, now time.Time) (*signer.PendingCA, error) {
	key, err := i.newCAKey(ctx, now)
	if err != nil {
		return nil, fmt.Errorf("making the next CA's key: %w", err)
	}
	var org string
	if i.cfg.Upstream != nil {
		org = i.cfg.Upstream.Organization
	}
	csr, err := signer.IntermediateRequest(key, signer.IntermediateOptions{ClusterDomain: i.cfg.ClusterDomain, Organization: org, Now: now})
	if err != nil {
		return nil, err
	}
	return &signer.PendingCA{Key: key, RequestPEM: csr, CreatedAt: now, Reason: reason}, nil
}

// Import checks a CA certificate signed for the pending request (signer.CheckIntermediate, with the
// configured roots, minimum validity and constraints policy) and stores it as the Next CA, with a fenced
// write, on the leader; a follower hands it to the leader through etcd, as it does a signing request.
// A refusal is a *signer.IntermediateError listing every problem; with nothing pending the error wraps
// signer.ErrNoPendingRequest, and without an Upstream configuration ErrUpstreamOff. ErrNoLeader
// (wrapped) means no leader answered in time. Nothing is stored unless everything was accepted.
func (i *Issuer) Import(ctx context.Context, req ImportRequest) (*ImportResult, error) {
	if i.cfg.Upstream == nil {
		return nil, ErrUpstreamOff
	}
	res, err := i.importAsLeader(ctx, req)
	if !errors.Is(err, ErrNotLeading) {
		return res, err
	}
	resp, err := i.handoffRaw(ctx, handoffRequest{Import: &req})
	if err != nil {
		return nil, err
	}
	switch {
	case len(resp.Problems) > 0:
		return nil, &signer.IntermediateError{Problems: resp.Problems, Warnings: resp.Warnings}
	case resp.NoPending:
		return nil, fmt.Errorf("%w: %s", signer.ErrNoPendingRequest, resp.Error)
	case resp.Error != "":
		return nil, fmt.Errorf("the leader could not import the CA certificate: %s", resp.Error)
	case resp.Import == nil:
		return nil, errors.New("the leader's answer holds no import result")
	}
	return resp.Import, nil
}

// importAsLeader is Import on the leader; ErrNotLeading elsewhere.
func (i *Issuer) importAsLeader(ctx context.Context, req ImportRequest) (*ImportResult, error) {
	i.writeMu.Lock()
	defer i.writeMu.Unlock()
	i.mu.RLock()
	leading, stored, recovery, modRev, key, rev := i.leading, i.auth, i.recovery, i.modRev, i.termKey, i.termRev
	i.mu.RUnlock()
	if !leading || stored.Active == nil || !i.leaseValid() {
		return nil, ErrNotLeading
	}
	if stored.Pending == nil {
		if stored.Next != nil {
			return nil, fmt.Errorf("%w: the Next CA %s is published already and waits for the rotation gate", signer.ErrNoPendingRequest, signer.FormatSerialNumber(stored.Next.Certificate.SerialNumber))
		}
		return nil, signer.ErrNoPendingRequest
	}
	now := i.cfg.Clock.Now()
	up := i.cfg.Upstream
	ca, warnings, err := signer.CheckIntermediate([]byte(req.CertificatePEM), []byte(req.ChainPEM), stored.Pending.Key, signer.ImportOptions{
		ClusterDomain: i.cfg.ClusterDomain, RootsPEM: up.RootsPEM, MinRemaining: up.MinRemaining,
		AcceptWiderConstraints: up.AcceptWiderConstraints, Now: now,
	})
	if err != nil {
		return nil, err
	}
	next, err := stored.ImportNext(ca, now)
	if err != nil {
		return nil, fmt.Errorf("importing the CA certificate: %w", err)
	}
	res := &ImportResult{Role: RoleNext, SerialNumber: signer.FormatSerialNumber(ca.Certificate.SerialNumber), SubjectKeyID: ca.SubjectKeyID(),
		NotBefore: ca.Certificate.NotBefore, NotAfter: ca.Certificate.NotAfter, ChainNotAfter: ca.ChainNotAfter(),
		Root: describeRoot(ca), Warnings: warnings}
	if req.DryRun {
		return res, nil
	}
	newRev, err := i.store.save(ctx, next, recovery, modRev, key, rev)
	if err != nil {
		return nil, fmt.Errorf("storing the imported CA: %w", err)
	}
	i.adopt(ctx, stored, next, newRev, key, true)
	klog.FromContext(ctx).Info("Imported the CA certificate an organisation's CA signed; it is the Next CA",
		"serialNumber", res.SerialNumber, "notAfter", res.NotAfter, "chainNotAfter", res.ChainNotAfter, "root", res.Root, "warnings", len(warnings))
	return res, nil
}

// describeRoot names ca's trust anchor by subject and serial number.
func describeRoot(ca *signer.CA) string {
	r := ca.Root()
	return fmt.Sprintf("%s (serial %s)", r.Subject.String(), signer.FormatSerialNumber(r.SerialNumber))
}
