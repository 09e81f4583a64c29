package certificateauthority

import (
	"context"
	"io"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

// cachingObject stands for the watch cache's runtime.CacheableObject: GetObject returns a copy.
type cachingObject struct {
	runtime.Object
	ca *certapi.CertificateAuthority
}

func (c *cachingObject) CacheEncode(runtime.Identifier, func(runtime.Object, io.Writer) error, io.Writer) error {
	return nil
}
func (c *cachingObject) GetObject() runtime.Object { return c.ca.DeepCopy() }

func leads(id string) LeaderFunc {
	return func(context.Context) (string, bool, error) { return id, true, nil }
}

// TestFillEvent: an event's CertificateAuthority is sent with status.leader, and the object the watch
// cache shares among watchers is left as it was; bookmarks pass untouched.
func TestFillEvent(t *testing.T) {
	f := leaderFiller{leader: leads("certapi-0")}
	shared := &certapi.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	for _, obj := range []runtime.Object{shared, &cachingObject{ca: shared}} {
		e := f.event(context.Background(), watch.Event{Type: watch.Modified, Object: obj})
		got, ok := e.Object.(*certapi.CertificateAuthority)
		if !ok || got.Status.Leader == nil || got.Status.Leader.Identity != "certapi-0" {
			t.Fatalf("event object %#v, want a CertificateAuthority led by certapi-0", e.Object)
		}
		if shared.Status.Leader != nil {
			t.Fatal("the shared object was changed")
		}
	}
	bookmark := &certapi.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9"}}
	if e := f.event(context.Background(), watch.Event{Type: watch.Bookmark, Object: bookmark}); e.Object != bookmark || bookmark.Status.Leader != nil {
		t.Fatalf("a bookmark was changed: %#v", e.Object)
	}
}

// TestFillList: every item of a list gets status.leader; an empty list reads no election.
func TestFillList(t *testing.T) {
	reads := 0
	f := leaderFiller{leader: func(context.Context) (string, bool, error) { reads++; return "", false, nil }}
	f.fill(context.Background(), &certapi.CertificateAuthorityList{})
	if reads != 0 {
		t.Fatalf("%d reads of the election for an empty list", reads)
	}
	l := &certapi.CertificateAuthorityList{Items: []certapi.CertificateAuthority{{}}}
	f.fill(context.Background(), l)
	if reads != 1 || l.Items[0].Status.Leader == nil || l.Items[0].Status.Leader.State != certapi.LeaderStateNone {
		t.Fatalf("reads %d, item %+v; want one read and state None", reads, l.Items[0].Status)
	}
	if got := (leaderFiller{}).read(context.Background()); got.State != certapi.LeaderStateUnknown {
		t.Fatalf("without a LeaderFunc: %+v, want Unknown", got)
	}
}

// TestLeaderWatch: events pass with status.leader; Stop stops the wrapped watch and closes the result;
// so does the end of the request's context.
func TestLeaderWatch(t *testing.T) {
	f := leaderFiller{leader: leads("certapi-1")}
	for _, stop := range []string{"Stop", "context"} {
		t.Run(stop, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			in := watch.NewFake()
			w := f.watch(ctx, in)
			go in.Add(&certapi.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: "default"}})
			select {
			case e := <-w.ResultChan():
				if ca := e.Object.(*certapi.CertificateAuthority); ca.Status.Leader == nil || ca.Status.Leader.Identity != "certapi-1" {
					t.Fatalf("event %+v", ca.Status)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no event")
			}
			if stop == "Stop" {
				w.Stop()
			} else {
				cancel()
			}
			select {
			case _, ok := <-w.ResultChan():
				if ok {
					t.Fatal("an event after the end")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the result channel stayed open")
			}
			if !in.IsStopped() {
				t.Fatal("the wrapped watch was not stopped")
			}
		})
	}
}
