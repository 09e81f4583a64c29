package listwatch

import (
	"context"
	"io"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/install"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// fakeStorage serves one list and one watch of internal objects, as a registry Store does.
type fakeStorage struct {
	list      *certapi.ServingCertRequestList
	watcher   *watch.FakeWatcher
	namespace string // the namespace of the last call's context
	options   *metainternalversion.ListOptions
}

func (f *fakeStorage) NewList() runtime.Object { return &certapi.ServingCertRequestList{} }
func (f *fakeStorage) ConvertToTable(context.Context, runtime.Object, runtime.Object) (*metav1.Table, error) {
	return nil, nil
}

func (f *fakeStorage) List(ctx context.Context, o *metainternalversion.ListOptions) (runtime.Object, error) {
	f.namespace, _ = genericapirequest.NamespaceFrom(ctx)
	f.options = o
	return f.list, nil
}

func (f *fakeStorage) Watch(ctx context.Context, o *metainternalversion.ListOptions) (watch.Interface, error) {
	f.namespace, _ = genericapirequest.NamespaceFrom(ctx)
	f.options = o
	return f.watcher, nil
}

// cached wraps an object as the watch cache does, with the encodings it made of it.
type cached struct {
	runtime.Object
}

func (c cached) CacheEncode(runtime.Identifier, func(runtime.Object, io.Writer) error, io.Writer) error {
	return nil
}
func (c cached) GetObject() runtime.Object { return c.Object.DeepCopyObject() }

func newScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	install.Install(s)
	return s
}

func internalRequest(name string) *certapi.ServingCertRequest {
	return &certapi.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "7", Labels: map[string]string{"a": "b"}},
		Spec:       certapi.ServingCertRequestSpec{ServiceName: name, DNSNames: []string{name + ".ns.svc"}},
		Status:     certapi.ServingCertRequestStatus{Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue}}},
	}
}

// TestList: a list of every namespace comes back in the versioned type, with the options passed on,
// and shares no slice or map with what the storage holds.
func TestList(t *testing.T) {
	stored := internalRequest("a")
	st := &fakeStorage{list: &certapi.ServingCertRequestList{ListMeta: metav1.ListMeta{ResourceVersion: "9"}, Items: []certapi.ServingCertRequest{*stored}}}
	lw := New(st, newScheme(t), func() runtime.Object { return &v1alpha1.ServingCertRequest{} }, func() runtime.Object { return &v1alpha1.ServingCertRequestList{} })
	obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0", LabelSelector: "a=b"})
	if err != nil {
		t.Fatal(err)
	}
	list, ok := obj.(*v1alpha1.ServingCertRequestList)
	if !ok {
		t.Fatalf("list is a %T; want *v1alpha1.ServingCertRequestList", obj)
	}
	if list.ResourceVersion != "9" || len(list.Items) != 1 || list.Items[0].Name != "a" || list.Items[0].Spec.ServiceName != "a" {
		t.Errorf("list %+v; want the stored request at resourceVersion 9", list)
	}
	if st.namespace != metav1.NamespaceAll {
		t.Errorf("listed namespace %q; want every namespace", st.namespace)
	}
	if st.options.ResourceVersion != "0" || st.options.LabelSelector.String() != "a=b" {
		t.Errorf("storage got options %+v; want resourceVersion 0 and the label selector", st.options)
	}
	// A change to the list's items must not reach what the storage holds.
	list.Items[0].Spec.DNSNames[0] = "changed"
	list.Items[0].Labels["a"] = "changed"
	list.Items[0].Status.Conditions[0].Status = metav1.ConditionFalse
	if got := st.list.Items[0]; got.Spec.DNSNames[0] != "a.ns.svc" || got.Labels["a"] != "b" || got.Status.Conditions[0].Status != metav1.ConditionTrue {
		t.Errorf("the stored request changed with the listed one: %+v", got)
	}
}

// TestWatch: events come in the versioned type, objects the watch cache wrapped included, a
// bookmark passes, and changing an event's object does not change the storage's. A conversion that
// fails ends the watch with an error event; Stop stops the storage's watch and may be called twice.
func TestWatch(t *testing.T) {
	st := &fakeStorage{watcher: watch.NewFake()}
	lw := New(st, newScheme(t), func() runtime.Object { return &v1alpha1.ServingCertRequest{} }, func() runtime.Object { return &v1alpha1.ServingCertRequestList{} })
	w, err := lw.WatchWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "5", AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	if st.namespace != metav1.NamespaceAll || st.options.ResourceVersion != "5" || !st.options.AllowWatchBookmarks {
		t.Errorf("storage watch in namespace %q with %+v; want every namespace, resourceVersion 5, bookmarks", st.namespace, st.options)
	}
	plain, wrapped := internalRequest("plain"), internalRequest("wrapped")
	bookmark := &certapi.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "8"}}
	go func() {
		st.watcher.Add(plain)
		st.watcher.Modify(cached{wrapped})
		st.watcher.Action(watch.Bookmark, bookmark)
		st.watcher.Add(&certapi.CertificateAuthority{}) // no conversion into a ServingCertRequest
	}()
	want := []struct {
		typ  watch.EventType
		name string
		rv   string
	}{{watch.Added, "plain", "7"}, {watch.Modified, "wrapped", "7"}, {watch.Bookmark, "", "8"}}
	for i, ev := range want {
		got := next(t, w)
		r, ok := got.Object.(*v1alpha1.ServingCertRequest)
		if got.Type != ev.typ || !ok || r.Name != ev.name || r.ResourceVersion != ev.rv {
			t.Fatalf("event %d: %s %#v; want %s of %q at %s", i, got.Type, got.Object, ev.typ, ev.name, ev.rv)
		}
		if i == 0 {
			r.Spec.DNSNames[0] = "changed"
			r.Labels["a"] = "changed"
		}
	}
	if plain.Spec.DNSNames[0] != "plain.ns.svc" || plain.Labels["a"] != "b" {
		t.Errorf("the stored request changed with the watched one: %+v", plain)
	}
	if ev := next(t, w); ev.Type != watch.Error {
		t.Errorf("event after a failed conversion: %s; want Error", ev.Type)
	}
	select {
	case _, open := <-w.ResultChan():
		if open {
			t.Error("the watch goes on after an error event; want it closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end after an error event")
	}
	w.Stop()
	w.Stop()
	if !st.watcher.IsStopped() {
		t.Error("the storage's watch is not stopped")
	}
}

// TestWatchStops: Stop and the end of the context each end the watch and the storage's.
func TestWatchStops(t *testing.T) {
	for _, byContext := range []bool{false, true} {
		st := &fakeStorage{watcher: watch.NewFake()}
		lw := New(st, newScheme(t), func() runtime.Object { return &v1alpha1.ServingCertRequest{} }, func() runtime.Object { return &v1alpha1.ServingCertRequestList{} })
		ctx, cancel := context.WithCancel(context.Background())
		w, err := lw.WatchWithContext(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if byContext {
			cancel()
		} else {
			w.Stop()
		}
		select {
		case _, open := <-w.ResultChan():
			if open {
				t.Errorf("byContext=%v: an event after the end; want the channel closed", byContext)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("byContext=%v: the watch did not end", byContext)
		}
		if !st.watcher.IsStopped() {
			t.Errorf("byContext=%v: the storage's watch is not stopped", byContext)
		}
		cancel()
	}
}

func next(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return watch.Event{}
}
