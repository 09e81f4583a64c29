package upstreamcsr

import (
	"bytes"
	"fmt"
)

// pendingView is what decide reads of the CA certificate request that waits for a signature.
type pendingView struct {
	// name is the CertificateSigningRequest's name for it (signer.PendingCA.Name).
	name string
	// request is its PEM PKCS#10 request.
	request []byte
}

// csrView is what decide reads of one CertificateSigningRequest labelled certapi.dev/ca-request.
type csrView struct {
	name, resourceVersion string
	request               []byte
	signerName            string
	// approved, denied and failed are its conditions; reason and message those of a denial or failure.
	approved, denied, failed bool
	reason, message          string
	// certificate is status.certificate: what the signer issued, PEM.
	certificate []byte
	// deleting: it has a deletionTimestamp.
	deleting bool
}

// decision is what sync does: at most one create, deletions, at most one import, and the state of the
// pending request's CertificateSigningRequest in words.
type decision struct {
	// create: make the CertificateSigningRequest for the pending request.
	create bool
	// remove names the CertificateSigningRequests to delete: unsigned ones whose request no longer waits,
	// and one for the pending request that asks something else (another signer, since certapi restarted
	// with another --ca-upstream-signer-name).
	remove []string
	// importFrom names the CertificateSigningRequest whose certificate to import.
	importFrom string
	// state is the pending request's CertificateSigningRequest's state: Creating, Pending (waits for
	// approval), Approved (waits for the signer), Denied, Failed, Issued, Refused (its certificate was
	// refused on import), Deleting; empty with nothing pending.
	state string
	// detail says what the state waits for or why it stopped, for the log and Events.
	detail string
}

// The states of a decision.
const (
	stateCreating = "Creating"
	statePending  = "Pending"
	stateApproved = "Approved"
	stateDenied   = "Denied"
	stateFailed   = "Failed"
	stateIssued   = "Issued"
	stateRefused  = "Refused"
	stateDeleting = "Deleting"
)

// decide says what to do about the CertificateSigningRequests certapi made (csrs), given the request that
// waits (nil: none) and the signer to ask. refused maps the name of a CertificateSigningRequest whose
// certificate was refused on import to the resourceVersion that held it: that certificate is not
// imported again (a signer that reissues changes the resourceVersion, and so does anyone who edits it).
// decide does no I/O.
func decide(pending *pendingView, signerName string, csrs []csrView, refused map[string]string) decision {
	var d decision
	var mine *csrView
	for i := range csrs {
		c := &csrs[i]
		if pending != nil && c.name == pending.name {
			mine = c
			continue
		}
		// An unsigned request for a key that no longer waits: a signer must not sign it later. A signed
		// one stays as a record until kube-controller-manager's CSR cleaner removes it (an hour after).
		if !c.deleting && len(c.certificate) == 0 && !c.denied && !c.failed {
			d.remove = append(d.remove, c.name)
		}
	}
	if pending == nil {
		return d
	}
	switch {
	case mine == nil:
		d.create, d.state = true, stateCreating
		d.detail = fmt.Sprintf("making CertificateSigningRequest %s for signer %s", pending.name, signerName)
	case mine.deleting:
		d.state, d.detail = stateDeleting, fmt.Sprintf("CertificateSigningRequest %s is being deleted; certapi makes it again once it is gone", mine.name)
	case !bytes.Equal(bytes.TrimSpace(mine.request), bytes.TrimSpace(pending.request)) || mine.signerName != signerName:
		d.remove = append(d.remove, mine.name)
		d.state = stateDeleting
		d.detail = fmt.Sprintf("CertificateSigningRequest %s asks signer %s for another request than the one that waits; certapi deletes it and makes it again for signer %s",
			mine.name, mine.signerName, signerName)
	case mine.denied:
		d.state = stateDenied
		d.detail = fmt.Sprintf("CertificateSigningRequest %s was denied (%s: %s); delete it for certapi to ask again", mine.name, mine.reason, mine.message)
	case mine.failed:
		d.state = stateFailed
		d.detail = fmt.Sprintf("signer %s failed CertificateSigningRequest %s (%s: %s); delete it for certapi to ask again", signerName, mine.name, mine.reason, mine.message)
	case len(mine.certificate) > 0 && refused[mine.name] == mine.resourceVersion:
		d.state = stateRefused
		d.detail = fmt.Sprintf("the certificate signer %s issued for CertificateSigningRequest %s was refused (see the CAImportRefused Event); "+
			"fix the signer's issuer and delete the CertificateSigningRequest for certapi to ask again", signerName, mine.name)
	case len(mine.certificate) > 0:
		d.importFrom, d.state = mine.name, stateIssued
		d.detail = fmt.Sprintf("signer %s issued the certificate of CertificateSigningRequest %s; importing it", signerName, mine.name)
	case mine.approved:
		d.state, d.detail = stateApproved, fmt.Sprintf("CertificateSigningRequest %s is approved and waits for signer %s to sign it", mine.name, signerName)
	default:
		d.state = statePending
		d.detail = fmt.Sprintf("CertificateSigningRequest %s waits for approval (kubectl certificate approve %s), then for signer %s", mine.name, mine.name, signerName)
	}
	return d
}
