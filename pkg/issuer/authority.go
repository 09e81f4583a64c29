// Package issuer is certapi's issuing service: leader election through etcd, the CA key pair stored in
// etcd with fenced writes, signing on the leader, and the handoff through which a follower replica gets a
// servingcerts request signed by the leader.
package issuer

import (
	"github.com/certapi/certapi/pkg/signer"
)

// Authority is the leader's view of the CA, for the loops that only the leader runs.
type Authority interface {
	// Signing returns the CA that signs now and the PEM bundle clients must trust. ok is false when this
	// replica does not lead (or lost its session a moment ago): callers must not sign then.
	Signing() (ca *signer.CA, bundle []byte, ok bool)
}
