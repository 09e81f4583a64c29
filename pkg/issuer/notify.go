package issuer

import (
	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/certapi/certapi/pkg/notify"
)

// AddListener registers lis to be told (lis.Enqueue, which must not block) whenever this replica starts
// or stops leading, or the Active CA or the trust bundle changes. A listener only learns that something
// changed; it reads the new state with Signing or State. Controllers of a leadership term register for
// the term and call the returned function when it ends.
func (i *Issuer) AddListener(lis dynamiccertificates.Listener) (remove func()) {
	return i.listeners.AddListener(lis)
}

// ListenerFunc adapts a function to dynamiccertificates.Listener.
type ListenerFunc = notify.ListenerFunc
