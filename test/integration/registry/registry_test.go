// Package registry_test runs the in-process access the leader has to certapi's own storage (the status
// writes of servingcertrequest.StatusUpdater, with the status.Writer that makes them, and the informers
// of listwatch) against a real etcd, through the same generic registry and watch cache certapi serves
// its API from.
package registry_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/client-go/tools/cache"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/apiserver"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/registry/listwatch"
	"github.com/certapi/certapi/pkg/registry/servingcertrequest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

var etcdServers []string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "registry-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithTimeout(context.Background(), framework.StartTimeout)
	cp := framework.StartMain(ctx, framework.Options{Dir: dir, SkipCertapi: true})
	cancel()
	if cp == nil {
		os.Exit(1)
	}
	etcdServers = cp.EtcdEndpoints
	code := m.Run()
	cp.Stop()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// newStorage returns ServingCertRequest storage with a watch cache on etcd, under a prefix of its own.
func newStorage(t *testing.T) (*servingcertrequest.REST, *servingcertrequest.StatusREST) {
	t.Helper()
	cfg := storagebackend.NewDefaultConfig("/registry-test-"+rand.String(6), nil)
	cfg.Transport.ServerList = etcdServers
	factory := serverstorage.NewDefaultStorageFactory(*cfg, runtime.ContentTypeJSON, apiserver.Codecs,
		serverstorage.NewDefaultResourceEncodingConfig(apiserver.Scheme), serverstorage.NewResourceConfig(), nil)
	opts := genericoptions.NewEtcdOptions(cfg)
	scr, status, err := servingcertrequest.NewREST(apiserver.Scheme, opts.CreateRESTOptionsGetter(factory, nil), "cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(scr.Destroy)
	return scr, status
}

func create(t *testing.T, scr *servingcertrequest.REST, namespace, name string) *certapi.ServingCertRequest {
	t.Helper()
	ctx := genericapirequest.WithNamespace(context.Background(), namespace)
	obj, err := scr.Create(ctx, &certapi.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"app": name},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "certapi.dev/v1alpha1"}}},
		// The defaults the API sets on v1alpha1 objects.
		Spec: certapi.ServingCertRequestSpec{ServiceName: name, SecretName: name + "-tls",
			Duration: &metav1.Duration{Duration: v1alpha1.DefaultDuration}, KeyAlgorithm: certapi.KeyAlgorithmECDSAP256},
	}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating %s/%s: %v", namespace, name, err)
	}
	return obj.(*certapi.ServingCertRequest)
}

func get(t *testing.T, scr *servingcertrequest.REST, namespace, name string) *certapi.ServingCertRequest {
	t.Helper()
	obj, err := scr.Get(genericapirequest.WithNamespace(context.Background(), namespace), name, &metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting %s/%s: %v", namespace, name, err)
	}
	return obj.(*certapi.ServingCertRequest)
}

func setReady(reason string) func(*v1alpha1.ServingCertRequest) bool {
	return func(obj *v1alpha1.ServingCertRequest) bool {
		return meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: reason, Message: reason})
	}
}

// TestStatusUpdater: a status change is written with the spec, labels and managed fields as stored; a
// change that changes nothing writes nothing; a request that does not exist is no error; and many
// writers at once each see their change land, with no conflict reaching them.
func TestStatusUpdater(t *testing.T) {
	scr, status := newStorage(t)
	u := servingcertrequest.NewStatusUpdater(status, apiserver.Scheme)
	ctx := context.Background()
	created := create(t, scr, "ns", "r")
	key := types.NamespacedName{Namespace: "ns", Name: "r"}

	if err := u.UpdateStatus(ctx, key, func(obj *v1alpha1.ServingCertRequest) bool {
		// A status writer's spec and label changes are not taken.
		obj.Spec.ServiceName = "elsewhere"
		obj.Labels = map[string]string{"app": "elsewhere"}
		obj.Status.SerialNumber = "01"
		return setReady("Issued")(obj)
	}); err != nil {
		t.Fatal(err)
	}
	got := get(t, scr, "ns", "r")
	if got.Status.SerialNumber != "01" || !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
		t.Errorf("status %+v; want serial 01 and Ready=True", got.Status)
	}
	if got.Spec.ServiceName != "r" || got.Labels["app"] != "r" {
		t.Errorf("spec %+v, labels %v; want them as created", got.Spec, got.Labels)
	}
	if len(got.ManagedFields) != 1 || got.ManagedFields[0].Manager != "kubectl" {
		t.Errorf("managedFields %+v; want the stored ones kept", got.ManagedFields)
	}
	if got.ResourceVersion == created.ResourceVersion {
		t.Errorf("resourceVersion unchanged after a status change")
	}

	calls := 0
	if err := u.UpdateStatus(ctx, key, func(obj *v1alpha1.ServingCertRequest) bool {
		calls++
		return setReady("Issued")(obj) // the condition it already has
	}); err != nil {
		t.Fatal(err)
	}
	if again := get(t, scr, "ns", "r"); again.ResourceVersion != got.ResourceVersion || calls == 0 {
		t.Errorf("an unchanged status was written (resourceVersion %s, was %s; mutate called %d times)", again.ResourceVersion, got.ResourceVersion, calls)
	}

	if err := u.UpdateStatus(ctx, types.NamespacedName{Namespace: "ns", Name: "missing"}, setReady("Issued")); err != nil {
		t.Errorf("status of a request that does not exist: %v; want nil", err)
	}

	const writers = 20
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Go(func() {
			errs <- u.UpdateStatus(ctx, key, func(obj *v1alpha1.ServingCertRequest) bool {
				return meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{Type: fmt.Sprintf("Writer%d", i), Status: metav1.ConditionTrue, Reason: "Test"})
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent status write: %v", err)
		}
	}
	final := get(t, scr, "ns", "r")
	for i := range writers {
		if meta.FindStatusCondition(final.Status.Conditions, fmt.Sprintf("Writer%d", i)) == nil {
			t.Errorf("condition Writer%d lost; conditions %+v", i, final.Status.Conditions)
		}
	}
}

// TestInformer: an informer on listwatch gets the requests that exist (from the watch cache's initial
// events), then each change as the storage makes it, in v1alpha1, deletions included; and changing what
// it holds does not change what the storage holds.
func TestInformer(t *testing.T) {
	scr, status := newStorage(t)
	u := servingcertrequest.NewStatusUpdater(status, apiserver.Scheme)
	create(t, scr, "a", "one")
	create(t, scr, "b", "two")

	lw := listwatch.New(scr, apiserver.Scheme,
		func() runtime.Object { return &v1alpha1.ServingCertRequest{} },
		func() runtime.Object { return &v1alpha1.ServingCertRequestList{} })
	informer := cache.NewSharedIndexInformer(lw, &v1alpha1.ServingCertRequest{}, 0, cache.Indexers{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		t.Fatal("the informer did not sync")
	}
	cached := func(key string) *v1alpha1.ServingCertRequest {
		obj, ok, _ := informer.GetStore().GetByKey(key)
		if !ok {
			return nil
		}
		return obj.(*v1alpha1.ServingCertRequest)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		testhelpers.Eventually(t, 10*time.Millisecond, 30*time.Second, what, func(context.Context) (bool, error) { return cond(), nil })
	}
	if r := cached("a/one"); r == nil || r.Spec.ServiceName != "one" || cached("b/two") == nil {
		t.Fatalf("the synced informer holds %v; want a/one and b/two", informer.GetStore().ListKeys())
	}

	create(t, scr, "a", "three")
	waitFor("a/three to be added", func() bool { return cached("a/three") != nil })

	if err := u.UpdateStatus(context.Background(), types.NamespacedName{Namespace: "a", Name: "one"}, setReady("Issued")); err != nil {
		t.Fatal(err)
	}
	waitFor("a/one's status", func() bool {
		r := cached("a/one")
		return r != nil && meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionReady)
	})

	// What the informer holds is its own: the watch cache (resourceVersion 0 reads from it) keeps its own.
	r := cached("a/one")
	r.Labels["app"] = "changed"
	r.Status.Conditions[0].Message = "changed"
	obj, err := scr.Get(genericapirequest.WithNamespace(context.Background(), "a"), "one", &metav1.GetOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if s := obj.(*certapi.ServingCertRequest); s.Labels["app"] != "one" || s.Status.Conditions[0].Message != "Issued" {
		t.Errorf("the stored request changed with the informer's: labels %v, conditions %+v", s.Labels, s.Status.Conditions)
	}

	ctxB := genericapirequest.WithNamespace(context.Background(), "b")
	if _, _, err := scr.Delete(ctxB, "two", rest.ValidateAllObjectFunc, &metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	waitFor("b/two to be deleted", func() bool { return cached("b/two") == nil })
}

// TestStatusWriter: the leader's coalescing status writer, on the status writes production makes
// (StatusUpdater on the storage), writes an issued certificate and then a new bundle into the stored
// request; a request that does not exist does not hold it up.
func TestStatusWriter(t *testing.T) {
	scr, st := newStorage(t)
	w := status.New(servingcertrequest.NewStatusUpdater(st, apiserver.Scheme), 10*time.Millisecond, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	create(t, scr, "ns", "w")
	key := types.NamespacedName{Namespace: "ns", Name: "w"}
	now := time.Now().Truncate(time.Second)
	waitFor := func(what string, cond func(*certapi.ServingCertRequest) bool) {
		t.Helper()
		testhelpers.WaitFor(t, 10*time.Millisecond, 30*time.Second, what, func(context.Context) (bool, string) {
			r := get(t, scr, "ns", "w")
			return cond(r), fmt.Sprintf("status %+v", r.Status)
		})
	}

	w.RecordIssued(types.NamespacedName{Namespace: "ns", Name: "missing"}, status.Issued{SerialNumber: "00", IssuedAt: now})
	w.RecordIssued(key, status.Issued{Certificate: "CERT", CABundle: "BUNDLE", SerialNumber: "01",
		NotBefore: now, NotAfter: now.Add(time.Hour), RenewalTime: now.Add(40 * time.Minute), IssuedAt: now})
	waitFor("the issued certificate", func(r *certapi.ServingCertRequest) bool {
		return r.Status.SerialNumber == "01" && r.Status.Certificate == "CERT" && r.Status.CABundle == "BUNDLE" &&
			meta.IsStatusConditionTrue(r.Status.Conditions, v1alpha1.ConditionReady)
	})
	w.SetBundle(key, "NEW")
	waitFor("the new bundle", func(r *certapi.ServingCertRequest) bool { return r.Status.CABundle == "NEW" })
	if got := get(t, scr, "ns", "w"); got.Spec.ServiceName != "w" || got.Labels["app"] != "w" {
		t.Errorf("spec %+v, labels %v; want them as created", got.Spec, got.Labels)
	}
}
