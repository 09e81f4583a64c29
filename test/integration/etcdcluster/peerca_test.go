package etcdcluster

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
)

// TestPeerCASecret: replicas starting together end up with one peer CA, created once in a Secret of
// certapi's namespace; the bootstrap record is kept on it; members formed from it serve mutual TLS.
func TestPeerCASecret(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns = "certapi-system"
	kube := startKubeAPIServer(ctx, t, ns)

	const replicas = 3
	cas := make([]*etcdcluster.PeerCA, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := &incluster.PeerCASecret{Client: kube, Namespace: ns, Name: incluster.DefaultSecretName, Member: "certapi-" + string(rune('0'+i))}
			cas[i], errs[i] = s.LoadOrCreate(ctx)
		}()
	}
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if !cas[i].Certificate.Equal(cas[0].Certificate) {
			t.Fatalf("replica %d holds another peer CA than replica 0: two CAs were created", i)
		}
	}
	sec, err := kube.CoreV1().Secrets(ns).Get(ctx, incluster.DefaultSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sec.Type != corev1.SecretTypeTLS || len(sec.Data[corev1.TLSPrivateKeyKey]) == 0 || sec.Labels[incluster.LabelPeerCA] != "true" {
		t.Fatalf("peer CA Secret: type %s, labels %v, keys %d", sec.Type, sec.Labels, len(sec.Data))
	}

	s := &incluster.PeerCASecret{Client: kube, Namespace: ns, Name: incluster.DefaultSecretName, Member: "certapi-0"}
	if existed, err := s.Existed(ctx); err != nil || existed {
		t.Fatalf("Existed before any bootstrap = %v, %v; want false", existed, err)
	}

	t.Log("a member formed from the Secret's CA bootstraps and records it")
	w := newWorld(t, 1)
	w.ca = cas[1]
	cfg := w.config(w.nodes[0])
	cfg.Bootstrap = s
	m, err := etcdcluster.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	if existed, err := s.Existed(ctx); err != nil || !existed {
		t.Fatalf("Existed after the bootstrap = %v, %v; want true", existed, err)
	}

	t.Log("members without data report it; a bootstrap forgets the reports")
	others := []string{"certapi-1", "certapi-2"}
	for _, name := range others {
		r := &incluster.PeerCASecret{Client: kube, Namespace: ns, Name: incluster.DefaultSecretName, Member: name}
		if ok, err := r.ReportedNoData(ctx, others, time.Minute); err != nil || ok {
			t.Fatalf("ReportedNoData before %s reported = %v, %v; want false", name, ok, err)
		}
		if err := r.ReportNoData(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := s.ReportedNoData(ctx, others, time.Minute); err != nil || !ok {
		t.Fatalf("ReportedNoData after both reported = %v, %v; want true", ok, err)
	}
	if err := s.Record(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ReportedNoData(ctx, others, time.Minute); err != nil || ok {
		t.Fatalf("ReportedNoData after a bootstrap = %v, %v; want false", ok, err)
	}
	w.nodes[0].member = m
	put(t, w.client(), "/k", "v")
	w.nodes[0].member = nil

	t.Log("every replica follows the Secret: a request to rotate, then the etcd leader's guarded replacement")
	states := make(chan etcdcluster.PeerCAState, 100)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	go func() { watched <- s.Watch(watchCtx, func(st etcdcluster.PeerCAState) { states <- st }) }()
	defer func() {
		stopWatch()
		if err := <-watched; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	next := func(what string, ok func(etcdcluster.PeerCAState) bool) etcdcluster.PeerCAState {
		t.Helper()
		timeout := time.NewTimer(30 * time.Second)
		defer timeout.Stop()
		for {
			select {
			case st := <-states:
				if ok(st) {
					return st
				}
			case <-timeout.C:
				t.Fatalf("the watch did not deliver %s within 30s", what)
			}
		}
	}
	next("the Secret's CA", func(st etcdcluster.PeerCAState) bool { return st.CA.Certificate.Equal(cas[0].Certificate) })
	patch := []byte(`{"metadata":{"annotations":{"` + certapiv1alpha1.AnnotationEtcdPeerCARotate + `":"now"}}}`)
	if _, err := kube.CoreV1().Secrets(ns).Patch(ctx, incluster.DefaultSecretName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	next("the request", func(st etcdcluster.PeerCAState) bool { return st.Requested == "now" && st.Handled == "" })
	successor, err := cas[0].Successor(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replace(ctx, successor, successor.Settled(), ""); err == nil {
		t.Fatal("Replace from a CA the Secret does not hold succeeded")
	}
	if err := s.Replace(ctx, cas[0], successor, "now"); err != nil {
		t.Fatal(err)
	}
	got := next("the successor", func(st etcdcluster.PeerCAState) bool { return st.CA.Equal(successor) })
	if got.Handled != "now" || !got.CA.Rotating() {
		t.Fatalf("after Replace: handled %q, rotating %v; want now, true", got.Handled, got.CA.Rotating())
	}
	if err := s.Replace(ctx, successor, successor.Settled(), ""); err != nil {
		t.Fatal(err)
	}
	got = next("the settled successor", func(st etcdcluster.PeerCAState) bool { return st.CA.Equal(successor.Settled()) })
	if got.Handled != "now" {
		t.Fatalf("a replacement without a request forgot the handled one: %q", got.Handled)
	}
	restarted, err := (&incluster.PeerCASecret{Client: kube, Namespace: ns, Name: incluster.DefaultSecretName, Member: "certapi-2"}).LoadOrCreate(ctx)
	if err != nil || !restarted.Equal(successor.Settled()) {
		t.Fatalf("a replica starting after the rotation loads another CA (%v)", err)
	}
}

// TestDesignatedWaitsWhenClusterExisted: ordinal 0 without data, while the Secret records a bootstrap and
// another member's pod exists but does not answer, must wait, never bootstrap a second cluster.
func TestDesignatedWaitsWhenClusterExisted(t *testing.T) {
	w := newWorld(t, 1)
	cfg := w.config(w.nodes[0])
	cfg.Bootstrap = recorded(true)
	cfg.Discover = func(context.Context) (etcdcluster.Discovery, error) {
		// A pod that exists but answers nowhere (its etcd restarting).
		return etcdcluster.Discovery{ClientURLs: []string{"https://127.0.0.1:" + freePort(t)}, OtherPeersExist: true}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if m, err := etcdcluster.Start(ctx, cfg); err == nil {
		m.Stop()
		t.Fatal("ordinal 0 without data bootstrapped a cluster while one existed and another member's pod exists")
	}
	if _, err := os.Stat(w.nodes[0].dir + "/etcd/member"); !os.IsNotExist(err) {
		t.Fatalf("etcd data was created: %v", err)
	}

	t.Log("the same member with no bootstrap recorded (first install, pods started in parallel) bootstraps")
	cfg.Bootstrap = recorded(false)
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	m, err := etcdcluster.Start(ctx2, cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Stop()

	t.Log("a cluster existed, every volume was lost and both other members report no data: bootstraps anew")
	if err := os.RemoveAll(w.nodes[0].dir); err != nil {
		t.Fatal(err)
	}
	cfg.Bootstrap = allLost{}
	cfg.DesiredMembers = func(context.Context) (int, bool) { return 3, true }
	ctx3, cancel3 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel3()
	if m, err = etcdcluster.Start(ctx3, cfg); err != nil {
		t.Fatal(err)
	}
	m.Stop()
}

// allLost is a BootstrapRecord of a cluster that existed whose other members all report having no data.
type allLost struct{}

func (allLost) Existed(context.Context) (bool, error) { return true, nil }
func (allLost) Record(context.Context) error          { return nil }
func (allLost) ReportNoData(context.Context) error    { return nil }
func (allLost) ReportedNoData(_ context.Context, members []string, _ time.Duration) (bool, error) {
	return len(members) == 2, nil
}

// recorded is a BootstrapRecord that says whether a cluster existed.
type recorded bool

func (r recorded) Existed(context.Context) (bool, error) { return bool(r), nil }
func (r recorded) Record(context.Context) error          { return nil }
func (r recorded) ReportNoData(context.Context) error    { return nil }
func (r recorded) ReportedNoData(context.Context, []string, time.Duration) (bool, error) {
	return false, nil
}
