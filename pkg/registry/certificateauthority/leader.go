package certificateauthority

import (
	"context"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

// LeaderFunc names the replica that holds the leader election now; ok is false when none does.
// status.leader is made from it at each read, so that `kubectl get certificateauthority` and `kubectl
// certapi check` see who leads now, not what was last written.
type LeaderFunc func(ctx context.Context) (identity string, ok bool, err error)

// leaderReadTimeout bounds the read of the leader election that a read of the CertificateAuthority makes:
// past it, status.leader says Unknown rather than hold the answer.
const leaderReadTimeout = 2 * time.Second

// leaderFiller fills status.leader in what the storage answers. The value is never stored: the
// strategies drop it from every write.
type leaderFiller struct {
	leader LeaderFunc
}

// read reads the leader election once.
func (f leaderFiller) read(ctx context.Context) *certapi.CertificateAuthorityLeader {
	if f.leader == nil {
		return leaderStatus("", false, errNoElection)
	}
	ctx, cancel := context.WithTimeout(ctx, leaderReadTimeout)
	defer cancel()
	id, ok, err := f.leader(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading the leader election for status.leader of the CertificateAuthority")
	}
	return leaderStatus(id, ok, err)
}

// errNoElection is the error of a storage made without a LeaderFunc.
var errNoElection = errors.New("no leader election is known to this storage")

// fill sets status.leader on obj, a CertificateAuthority or a list of them that the storage returned.
// Each is a copy of its own (the watch cache copies the struct it holds), so setting the pointer changes
// nothing the cache holds. Nothing is read for an empty list.
func (f leaderFiller) fill(ctx context.Context, obj runtime.Object) {
	switch o := obj.(type) {
	case *certapi.CertificateAuthority:
		o.Status.Leader = f.read(ctx)
	case *certapi.CertificateAuthorityList:
		if len(o.Items) == 0 {
			return
		}
		l := f.read(ctx)
		for i := range o.Items {
			o.Items[i].Status.Leader = l
		}
	}
}

// event returns e with status.leader filled in its object. The watch cache shares an event's object
// among watchers (wrapped, for some, in a runtime.CacheableObject), so the object is copied first:
// a shallow copy, as only the copy's status.leader pointer is set.
func (f leaderFiller) event(ctx context.Context, e watch.Event) watch.Event {
	if e.Type != watch.Added && e.Type != watch.Modified && e.Type != watch.Deleted {
		return e // bookmarks and errors carry no CertificateAuthority
	}
	obj := e.Object
	if c, ok := obj.(runtime.CacheableObject); ok {
		obj = c.GetObject()
	}
	ca, ok := obj.(*certapi.CertificateAuthority)
	if !ok {
		return e
	}
	out := *ca
	out.Status.Leader = f.read(ctx)
	e.Object = &out
	return e
}

// leaderWatch passes the events of a watch on, each with status.leader filled. Its goroutine ends when
// the watch it wraps ends, when Stop is called, or with the request's context.
type leaderWatch struct {
	in     watch.Interface
	out    chan watch.Event
	cancel context.CancelFunc
}

// watch wraps in; ctx is the watch request's.
func (f leaderFiller) watch(ctx context.Context, in watch.Interface) watch.Interface {
	ctx, cancel := context.WithCancel(ctx)
	w := &leaderWatch{in: in, out: make(chan watch.Event), cancel: cancel}
	go w.run(ctx, f)
	return w
}

func (w *leaderWatch) run(ctx context.Context, f leaderFiller) {
	defer close(w.out)
	defer w.in.Stop()
	for {
		select {
		case e, ok := <-w.in.ResultChan():
			if !ok {
				return
			}
			select {
			case w.out <- f.event(ctx, e):
			case <-ctx.Done():
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// ResultChan returns the events, with status.leader filled.
func (w *leaderWatch) ResultChan() <-chan watch.Event { return w.out }

// Stop ends the watch.
func (w *leaderWatch) Stop() {
	w.in.Stop()
	w.cancel()
}
