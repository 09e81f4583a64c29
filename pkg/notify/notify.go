// Package notify is the push half of k8s.io/apiserver's dynamiccertificates Notifier/Listener shape, for
// every producer in certapi that tells others something changed (the issuer's leadership and CA, a
// controller's targets and Secrets): a listener only learns that something changed and reads the new state
// itself, so a burst of changes costs one look.
package notify

import (
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// ListenerFunc adapts a function to dynamiccertificates.Listener.
type ListenerFunc func()

// Enqueue calls f.
func (f ListenerFunc) Enqueue() { f() }

// Listeners is a Notifier for a producer to hold: Notify tells every listener added. Its zero value is
// ready to use.
type Listeners struct {
	mu   sync.Mutex
	next int
	m    map[int]dynamiccertificates.Listener
}

// AddListener adds lis until remove is called.
func (l *Listeners) AddListener(lis dynamiccertificates.Listener) (remove func()) {
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

// Notify tells every listener that something changed. Listeners must not block.
func (l *Listeners) Notify() {
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
