package controller

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// testInformer is a ConfigMap informer whose list answers at once with one object, or (never set)
// blocks until the test ends, so that it never syncs. It counts the handlers added and removed.
type testInformer struct {
	cache.SharedIndexInformer
	added, removed atomic.Int32
	// listed is closed at the first list.
	listed   chan struct{}
	listOnce sync.Once
}

func newTestInformer(syncs bool) *testInformer {
	ti := &testInformer{listed: make(chan struct{})}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
			ti.listOnce.Do(func() { close(ti.listed) })
			if !syncs {
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "1"},
				Items: []corev1.ConfigMap{{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", ResourceVersion: "1"}}}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			return watch.NewFake(), nil
		},
	}
	ti.SharedIndexInformer = cache.NewSharedIndexInformer(listOnly{lw}, &corev1.ConfigMap{}, 0, cache.Indexers{})
	return ti
}

// listOnly makes the reflector list and then watch, as against a server without streaming lists: the
// test's watch sends no initial events.
type listOnly struct{ *cache.ListWatch }

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

func (ti *testInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, o cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	ti.added.Add(1)
	return ti.SharedIndexInformer.AddEventHandlerWithOptions(h, o)
}

func (ti *testInformer) RemoveEventHandler(reg cache.ResourceEventHandlerRegistration) error {
	ti.removed.Add(1)
	return ti.SharedIndexInformer.RemoveEventHandler(reg)
}

// testFactory starts and stops informers as an informer factory does.
type testFactory struct {
	informers []cache.SharedIndexInformer
	wg        sync.WaitGroup
}

func (f *testFactory) Start(stop <-chan struct{}) {
	for _, inf := range f.informers {
		f.wg.Go(func() { inf.Run(stop) })
	}
}

func (f *testFactory) Shutdown() { f.wg.Wait() }

// testController counts its runs and shut-downs; its Run waits for the term's end.
type testController struct {
	runs, shutDowns atomic.Int32
	running         chan struct{}
}

func (c *testController) Run(ctx context.Context) error {
	if c.runs.Add(1) == 1 {
		close(c.running)
	}
	<-ctx.Done()
	return nil
}

func (c *testController) ShutDown() { c.shutDowns.Add(1) }

// TestRunTerm: the term waits once for every declared cache before it runs any controller, adds the
// declared listeners only then, removes every handler and listener at its end, shuts down controllers
// it never ran, and runs only once.
func TestRunTerm(t *testing.T) {
	cases := []struct {
		name string
		// secondSyncs says whether the second controller's informer ever syncs.
		secondSyncs bool
		// again runs the term a second time after the first ended.
		again       bool
		wantRuns    int32
		wantShutDns int32
	}{
		{name: "every cache syncs: every controller runs", secondSyncs: true, wantRuns: 1},
		{name: "one informer never syncs: no controller runs, each is shut down", secondSyncs: false, wantRuns: 0, wantShutDns: 1},
		{name: "a second RunTerm is refused and runs nothing", secondSyncs: true, again: true, wantRuns: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first, second := newTestInformer(true), newTestInformer(tc.secondSyncs)
			cc := &Context{}
			cc.AddFactory(&testFactory{informers: []cache.SharedIndexInformer{first, second}})
			var events atomic.Int32
			handler := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { events.Add(1) }}
			firstSynced := cc.Watch(first, handler)
			cc.Watch(second, handler)
			notifier := &Listeners{}
			var told atomic.Int32
			cc.Listen(notifier, func() { told.Add(1) })
			a := &testController{running: make(chan struct{})}
			b := &testController{running: make(chan struct{})}

			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- cc.RunTerm(ctx, Named{Name: "a", Runnable: a}, Named{Name: "b", Runnable: b}) }()
			if tc.secondSyncs {
				<-a.running
				<-b.running
				if !firstSynced() {
					t.Error("a controller ran before its handler had seen the initial list")
				}
				notifier.Notify()
				if told.Load() != 1 {
					t.Errorf("the listener was told %d times of one change; want 1", told.Load())
				}
			} else {
				<-second.listed // the term waits for it
				waitFor(t, "the first informer's cache", firstSynced)
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("RunTerm: %v", err)
			}
			if tc.again {
				if err := cc.RunTerm(context.Background(), Named{Name: "a", Runnable: a}); err == nil {
					t.Error("a second RunTerm of one Context was accepted")
				}
			}
			for name, c := range map[string]*testController{"a": a, "b": b} {
				if got := c.runs.Load(); got != tc.wantRuns {
					t.Errorf("controller %s ran %d times; want %d", name, got, tc.wantRuns)
				}
				if got := c.shutDowns.Load(); got != tc.wantShutDns {
					t.Errorf("controller %s was shut down %d times; want %d", name, got, tc.wantShutDns)
				}
			}
			for name, inf := range map[string]*testInformer{"first": first, "second": second} {
				if inf.added.Load() != 1 || inf.removed.Load() != 1 {
					t.Errorf("%s informer: %d handlers added, %d removed; want 1 and 1", name, inf.added.Load(), inf.removed.Load())
				}
			}
			// A listener left after the term would be told now.
			notifier.Notify()
			if tc.secondSyncs && told.Load() != 1 {
				t.Errorf("the listener was told after the term ended")
			}
			if !tc.secondSyncs && told.Load() != 0 {
				t.Errorf("the listener was added although no controller ran")
			}
		})
	}
}

// TestDeclareAfterStartPanics: a controller built while its term already runs would miss the wait for
// caches; declaring anything then is a programming error.
func TestDeclareAfterStartPanics(t *testing.T) {
	cc := &Context{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := cc.RunTerm(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Error("Listen after RunTerm did not panic")
		}
	}()
	cc.Listen(&Listeners{}, func() {})
}

// TestQueueRunsOnce: a queue, and so every controller whose run is its queue, refuses a second Run and
// a Run after ShutDown.
func TestQueueRunsOnce(t *testing.T) {
	cases := []struct {
		name  string
		first func(q *Queue[string])
	}{
		{name: "after a Run", first: func(q *Queue[string]) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := q.Run(ctx); err != nil {
				t.Fatalf("first Run: %v", err)
			}
		}},
		{name: "after ShutDown", first: func(q *Queue[string]) { q.ShutDown() }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := NewQueue(QueueOptions[string]{Name: "test", Sync: func(context.Context, string) (Result, error) { return Result{}, nil }})
			tc.first(q)
			if err := q.Run(context.Background()); err == nil {
				t.Error("a second Run was accepted")
			}
		})
	}
}
