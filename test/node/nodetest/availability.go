package nodetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/certapi/certapi/test/framework"
)

// Availability watches an APIService's Available condition from the moment WatchAvailability returns: an
// informer on that one object, so that every status kube-apiserver's availability controller writes is
// seen, a dropped watch included (the informer lists again).
type Availability struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu sync.Mutex
	// seen is every condition other than Available=True, and the APIService's deletion.
	seen []NotAvailable
	// updates counts the APIService's observed versions.
	updates int
}

// WatchAvailability starts watching the APIService name; Stop ends it. It waits until the informer has
// listed the object, so a change after it returns is never missed.
func WatchAvailability(t *testing.T, cp *framework.ControlPlane, name string) *Availability {
	t.Helper()
	agg, err := aggregatorclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return agg.ApiregistrationV1().APIServices().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return agg.ApiregistrationV1().APIServices().Watch(ctx, o)
		},
	}
	informer := cache.NewSharedIndexInformer(lw, &apiregistrationv1.APIService{}, 0, cache.Indexers{})
	a := &Availability{done: make(chan struct{})}
	record := func(obj any) {
		svc, ok := obj.(*apiregistrationv1.APIService)
		if !ok {
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.updates++
		for _, c := range svc.Status.Conditions {
			if c.Type == apiregistrationv1.Available && c.Status != apiregistrationv1.ConditionTrue {
				a.seen = append(a.seen, NotAvailable{When: time.Now(), Status: string(c.Status), Reason: c.Reason, Message: c.Message})
			}
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    record,
		UpdateFunc: func(_, obj any) { record(obj) },
		DeleteFunc: func(any) {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.seen = append(a.seen, NotAvailable{When: time.Now(), Reason: "Deleted", Message: "the APIService was deleted"})
		},
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() {
		defer close(a.done)
		informer.RunWithContext(ctx)
	}()
	t.Cleanup(a.Stop)
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		t.Fatalf("watching APIService %s: the informer did not sync", name)
	}
	return a
}

// NotAvailable is an observed Available condition other than True, or the APIService's deletion.
type NotAvailable struct {
	When                    time.Time
	Status, Reason, Message string
}

func (n NotAvailable) String() string {
	return fmt.Sprintf("%s: Available=%s %s: %s", n.When.UTC().Format(time.StampMilli), n.Status, n.Reason, n.Message)
}

// Check fails the test if the APIService was anything but Available since the last check, logs what was
// seen, and resets it.
func (a *Availability) Check(t *testing.T, what string) {
	t.Helper()
	a.CheckExcept(t, what, nil)
}

// CheckExcept is Check for a disruption in which kube-apiserver may rightly report the APIService not
// Available: what expected accepts is logged, not failed. A nil expected accepts nothing.
func (a *Availability) CheckExcept(t *testing.T, what string, expected func(NotAvailable) bool) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	t.Logf("%s: the APIService's status observed %d times, not Available %d times", what, a.updates, len(a.seen))
	for _, s := range a.seen {
		if expected != nil && expected(s) {
			t.Logf("%s: expected: %s", what, s)
			continue
		}
		t.Errorf("%s: %s", what, s)
	}
	a.seen, a.updates = nil, 0
}

// Stop ends the watch and waits for it. It is safe to call more than once.
func (a *Availability) Stop() {
	a.cancel()
	<-a.done
}
