package registry_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/apiserver"
	"github.com/certapi/certapi/pkg/registry/certificateauthority"
	"github.com/certapi/certapi/test/testhelpers"
)

// election is a leader election the test sets: who leads, or the error reading it; reads counts its
// reads.
type election struct {
	mu       sync.Mutex
	identity string
	err      error
	reads    int
}

func (e *election) set(identity string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.identity, e.err = identity, err
}

func (e *election) leader(context.Context) (string, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.reads++
	return e.identity, e.identity != "", e.err
}

func (e *election) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.reads
}

// fromCache returns read's answer, read again while the watch cache answers 429 "storage is
// (re)initializing", as a client does after its Retry-After: a List or a Watch at a resourceVersion waits for
// the cache to have listed etcd (a Get at one reads etcd meanwhile), and the cache lists again when its
// watch on etcd breaks, as it can on a loaded machine.
func fromCache[T any](t *testing.T, read func() (T, error)) T {
	t.Helper()
	var got T
	said := false
	testhelpers.Eventually(t, 100*time.Millisecond, 30*time.Second, "the watch cache to answer", func(context.Context) (bool, error) {
		var err error
		got, err = read()
		if apierrors.IsTooManyRequests(err) {
			if !said {
				t.Logf("the watch cache answered %v; reading again until it answers", err)
				said = true
			}
			return false, nil
		}
		return true, err
	})
	return got
}

// TestCertificateAuthorityLeader runs status.leader through the CertificateAuthority storage on a real
// etcd with its watch cache: get, list, a watch event and the answers of writes carry the election as it
// is at that read; a status write of status.leader is dropped, so etcd never holds one; the watch cache's
// copy is never changed; the leader's in-process status writes do not read the election.
func TestCertificateAuthorityLeader(t *testing.T) {
	prefix := "/registry-test-" + rand.String(6)
	cfg := storagebackend.NewDefaultConfig(prefix, nil)
	cfg.Transport.ServerList = etcdServers
	factory := serverstorage.NewDefaultStorageFactory(*cfg, runtime.ContentTypeJSON, apiserver.Codecs,
		serverstorage.NewDefaultResourceEncodingConfig(apiserver.Scheme), serverstorage.NewResourceConfig(), nil)
	opts := genericoptions.NewEtcdOptions(cfg)
	e := &election{identity: "certapi-0"}
	ca, status, err := certificateauthority.NewREST(apiserver.Scheme, opts.CreateRESTOptionsGetter(factory, nil), e.leader)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ca.Destroy)
	// The storage keys objects by the request's namespace: none, for this cluster-scoped kind.
	ctx := genericapirequest.WithNamespace(context.Background(), metav1.NamespaceNone)
	leaderOf := func(obj runtime.Object) certapi.CertificateAuthorityLeader {
		t.Helper()
		l := obj.(*certapi.CertificateAuthority).Status.Leader
		if l == nil {
			t.Fatalf("no status.leader in %+v", obj)
		}
		return *l
	}
	elected := func(id string) certapi.CertificateAuthorityLeader {
		return certapi.CertificateAuthorityLeader{State: certapi.LeaderStateElected, Identity: id}
	}

	created, err := ca.Create(ctx, &certapi.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.CertificateAuthorityName},
		Spec: certapi.CertificateAuthoritySpec{Duration: &metav1.Duration{Duration: v1alpha1.DefaultCADuration}}}, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := leaderOf(created); got != elected("certapi-0") {
		t.Errorf("create answered status.leader %+v", got)
	}
	// Reads at this resourceVersion or newer come from the watch cache once it has listed etcd. A Get
	// with a resourceVersion goes to etcd while the cache is not ready; a List waits for it (429 until then).
	createdRV := created.(*certapi.CertificateAuthority).ResourceVersion
	fromCache(t, func() (runtime.Object, error) {
		return ca.List(ctx, &metainternalversion.ListOptions{ResourceVersion: createdRV})
	})

	for _, tc := range []struct {
		name     string
		identity string
		err      error
		want     certapi.CertificateAuthorityLeader
	}{
		{"a leader", "certapi-1", nil, elected("certapi-1")},
		{"none", "", nil, certapi.CertificateAuthorityLeader{State: certapi.LeaderStateNone}},
		{"the election unreadable", "", errors.New("etcdserver: request timed out"), certapi.CertificateAuthorityLeader{State: certapi.LeaderStateUnknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.set(tc.identity, tc.err)
			obj, err := ca.Get(ctx, v1alpha1.CertificateAuthorityName, &metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := leaderOf(obj); got != tc.want {
				t.Errorf("get: %+v, want %+v", got, tc.want)
			}
			// A read from the watch cache too.
			list := fromCache(t, func() (runtime.Object, error) {
				return ca.List(ctx, &metainternalversion.ListOptions{ResourceVersion: createdRV})
			})
			if items := list.(*certapi.CertificateAuthorityList).Items; len(items) != 1 || items[0].Status.Leader == nil || *items[0].Status.Leader != tc.want {
				t.Errorf("list: %+v, want one item led by %+v", items, tc.want)
			}
			obj, err = status.Get(ctx, v1alpha1.CertificateAuthorityName, &metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := leaderOf(obj); got != tc.want {
				t.Errorf("get of the status subresource: %+v, want %+v", got, tc.want)
			}
		})
	}
	e.set("certapi-2", nil)

	// The store below the filling never had it: not in the watch cache, not in etcd.
	for _, rv := range []string{"", createdRV} {
		plain, err := ca.Store.Get(ctx, v1alpha1.CertificateAuthorityName, &metav1.GetOptions{ResourceVersion: rv})
		if err != nil {
			t.Fatal(err)
		}
		if l := plain.(*certapi.CertificateAuthority).Status.Leader; l != nil {
			t.Fatalf("the store (resourceVersion %q) holds status.leader %+v", rv, l)
		}
	}

	// A status write that carries status.leader (as a client's could) is stored without it.
	forged := created.(*certapi.CertificateAuthority).DeepCopy()
	forged.Status.Leader = &certapi.CertificateAuthorityLeader{State: certapi.LeaderStateElected, Identity: "forged"}
	forged.Status.ObservedGeneration = 1
	forged.ResourceVersion = ""
	written, _, err := status.Update(ctx, forged.Name, rest.DefaultUpdatedObjectInfo(forged), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := leaderOf(written); got != elected("certapi-2") {
		t.Errorf("the status write answered %+v, want the election's certapi-2", got)
	}
	etcd, err := clientv3.New(clientv3.Config{Endpoints: etcdServers, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	resp, err := etcd.Get(ctx, prefix+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("%d keys under %s, want the CertificateAuthority's", len(resp.Kvs), prefix)
	}
	if stored := string(resp.Kvs[0].Value); !strings.Contains(stored, `"observedGeneration":1`) || strings.Contains(stored, "leader") || strings.Contains(stored, "forged") {
		t.Fatalf("etcd holds %s; want the status write without status.leader", stored)
	}

	// The leader's in-process status writes do not read the election.
	before := e.count()
	if err := certificateauthority.NewStatusUpdater(status, apiserver.Scheme).UpdateStatus(ctx, func(obj *v1alpha1.CertificateAuthority) bool {
		obj.Status.CABundle = "bundle"
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if n := e.count() - before; n != 0 {
		t.Errorf("an in-process status write read the election %d times", n)
	}

	// A watch event carries the leader at the time it is sent (not at the write's); the watch cache's
	// object stays as it is.
	e.set("certapi-1", nil)
	w := fromCache(t, func() (watch.Interface, error) {
		return ca.Watch(ctx, &metainternalversion.ListOptions{ResourceVersion: written.(*certapi.CertificateAuthority).ResourceVersion})
	})
	defer w.Stop()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended")
			}
			if ev.Type != watch.Modified {
				continue
			}
			if got := leaderOf(ev.Object); got != elected("certapi-1") {
				t.Fatalf("watch event status.leader %+v, want certapi-1", got)
			}
			plain, err := ca.Store.Get(ctx, v1alpha1.CertificateAuthorityName, &metav1.GetOptions{ResourceVersion: ev.Object.(*certapi.CertificateAuthority).ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			if l := plain.(*certapi.CertificateAuthority).Status.Leader; l != nil {
				t.Fatalf("the watch cache holds status.leader %+v after the event", l)
			}
			return
		case <-timeout:
			t.Fatal("no Modified event for the status write within 30s")
		}
	}
}
