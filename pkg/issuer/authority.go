// Package issuer is certapi's issuing service: leader election through etcd, the CA key pair stored in
// etcd with fenced writes, signing on the leader, and the handoff through which a follower replica gets a
// servingcerts request signed by the leader.
package issuer

import (
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/certapi/certapi/pkg/signer"
)

// Authority is the leader's view of the CA, for the loops that only the leader runs. *Issuer is one.
type Authority interface {
	// Signing returns the CA that signs now and the PEM bundle clients must trust. ok is false when this
	// replica does not lead (or lost its session a moment ago): callers must not sign then.
	Signing() (ca *signer.CA, bundle []byte, ok bool)
	// Sign signs on this replica with the one issuance policy; ErrNotLeading when it does not lead.
	Sign(req Request) (*Result, error)
	// AddListener tells lis when leadership, the Active CA or the bundle changes; remove unregisters it.
	AddListener(lis dynamiccertificates.Listener) (remove func())
}

var _ Authority = &Issuer{}
