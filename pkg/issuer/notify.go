package issuer

import (
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// listeners are told when this replica starts or stops leading, or when the Active CA or the trust bundle
// changes: the push half of the Notifier/Listener shape of k8s.io/apiserver's dynamiccertificates. A
// listener only learns that something changed; it reads the new state with Signing or State.
type listeners struct {
	mu   sync.Mutex
	next int
	m    map[int]dynamiccertificates.Listener
}

func (l *listeners) add(lis dynamiccertificates.Listener) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[int]dynamiccertificates.Listener{}
	}
	id := l.next
	l.next++
	l.m[id] = lis
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.m, id)
	}
}

func (l *listeners) notify() {
	l.mu.Lock()
	all := make([]dynamiccertificates.Listener, 0, len(l.m))
	for _, lis := range l.m {
		all = append(all, lis)
	}
	l.mu.Unlock()
	for _, lis := range all {
		lis.Enqueue()
	}
}

// AddListener registers lis to be told (lis.Enqueue, which must not block) whenever this replica starts
// or stops leading, or the Active CA or the trust bundle changes. Controllers of a leadership term
// register for the term and call the returned function when it ends.
func (i *Issuer) AddListener(lis dynamiccertificates.Listener) (remove func()) {
	return i.listeners.add(lis)
}

// ListenerFunc adapts a function to dynamiccertificates.Listener.
type ListenerFunc func()

// Enqueue calls f.
func (f ListenerFunc) Enqueue() { f() }
