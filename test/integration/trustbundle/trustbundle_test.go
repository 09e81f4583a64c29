// Package trustbundle_test tests the ClusterTrustBundle publisher against a real etcd and
// kube-apiserver: it creates the signer-linked bundle, follows the Source, restores what another writer
// changes, re-creates it when deleted, and Holds says when the gate may open.
package trustbundle_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/trustbundle"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// bound is how soon a change must reach the ClusterTrustBundle: "within a second", as for injection.
const bound = time.Second

// source is a BundleSource the test sets; it tells its listeners of every set.
type source struct {
	mu        sync.Mutex
	pem       []byte
	listeners []dynamiccertificates.Listener
}

func (s *source) Bundle() ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.pem), len(s.pem) > 0
}

func (s *source) AddListener(l dynamiccertificates.Listener) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, l)
	return func() {}
}

func (s *source) set(pem []byte) {
	s.mu.Lock()
	s.pem = bytes.Clone(pem)
	ls := append([]dynamiccertificates.Listener(nil), s.listeners...)
	s.mu.Unlock()
	for _, l := range ls {
		l.Enqueue()
	}
}

func TestClusterTrustBundle(t *testing.T) {
	cp := framework.StartT(t, framework.Options{SkipCertapi: true})
	testhelpers.SkipUnlessServed(t, cp.AdminConfig, "certificates.k8s.io/v1", "clustertrustbundles")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	b1 := signertest.Bundle(t, 1)
	src := &source{}
	src.set(b1)
	kube := kubernetes.NewForConfigOrDie(rest.CopyConfig(cp.AdminConfig))
	clients, err := controller.NewKubeClients(rest.CopyConfig(cp.AdminConfig))
	if err != nil {
		t.Fatal(err)
	}
	termCtx, endTerm := context.WithCancel(context.Background())
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: clients.Kube.EventsV1()})
	cc := controller.NewContext("cluster.local", clients, broadcaster)
	var changes sync.WaitGroup
	changes.Add(1)
	var once sync.Once
	p, err := trustbundle.New(trustbundle.Options{Context: cc, Source: src})
	if err != nil {
		t.Fatal(err)
	}
	defer p.AddListener(controller.ListenerFunc(func() { once.Do(changes.Done) }))()
	done := make(chan error, 1)
	go func() { done <- cc.RunTerm(termCtx, controller.Named{Name: "trustbundle", Runnable: p}) }()
	defer func() {
		endTerm()
		if err := <-done; err != nil {
			t.Errorf("RunTerm: %v", err)
		}
	}()
	ctbs := kube.CertificatesV1().ClusterTrustBundles()
	holds := func(want []byte) func(context.Context) (bool, string) {
		return func(ctx context.Context) (bool, string) {
			b, err := ctbs.Get(ctx, trustbundle.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return b.Spec.TrustBundle == string(want), "another trust bundle"
		}
	}

	took := testhelpers.WaitFor(t, 10*time.Millisecond, 30*time.Second, "the ClusterTrustBundle created", holds(b1))
	t.Logf("ClusterTrustBundle created %s after the term started", took)
	changes.Wait() // the listeners were told
	b, err := ctbs.Get(ctx, trustbundle.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if b.Spec.SignerName != certapiv1alpha1.PodCertificateSignerName {
		t.Errorf("signerName %q", b.Spec.SignerName)
	}
	if len(b.ManagedFields) != 1 || b.ManagedFields[0].Manager != certapiv1alpha1.FieldManager {
		t.Errorf("managedFields = %+v; want one entry of %s", b.ManagedFields, certapiv1alpha1.FieldManager)
	}
	// Pods find it by signer name, as a clusterTrustBundle projection with signerName does.
	bySigner, err := ctbs.List(ctx, metav1.ListOptions{FieldSelector: "spec.signerName=" + certapiv1alpha1.PodCertificateSignerName})
	if err != nil || len(bySigner.Items) != 1 {
		t.Errorf("listing by signerName: %v, %d items", err, len(bySigner.Items))
	}
	testhelpers.WaitFor(t, 10*time.Millisecond, bound, "Holds(b1)", func(context.Context) (bool, string) { return p.Holds(b1) && p.UpToDate(), "not held" })

	// A rotation's [Active, Next] reaches it, and Holds follows.
	b2 := append(bytes.Clone(b1), signertest.Bundle(t, 1)...)
	if p.Holds(b2) {
		t.Fatal("Holds(b2) before the Source changed")
	}
	src.set(b2)
	took = testhelpers.WaitFor(t, 10*time.Millisecond, bound, "the new bundle", holds(b2))
	t.Logf("the new bundle reached the ClusterTrustBundle %s after the Source changed", took)
	testhelpers.WaitFor(t, 10*time.Millisecond, bound, "Holds(b2)", func(context.Context) (bool, string) { return p.Holds(b2) && !p.Holds(b1), "not held" })

	// Another writer's bundle is put back.
	cur, err := ctbs.Get(ctx, trustbundle.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.TrustBundle = string(b1)
	if _, err := ctbs.Update(ctx, cur, metav1.UpdateOptions{FieldManager: "intruder"}); err != nil {
		t.Fatal(err)
	}
	testhelpers.WaitFor(t, 10*time.Millisecond, bound, "the bundle restored", holds(b2))

	// Deleted: re-created.
	if err := ctbs.Delete(ctx, trustbundle.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testhelpers.WaitFor(t, 10*time.Millisecond, bound, "the ClusterTrustBundle re-created", holds(b2))
	if p.Problem() != "" {
		t.Errorf("Problem() = %q", p.Problem())
	}
}
