// Package trustbundle is the leader's publisher of certapi's CA bundle as a signer-linked
// ClusterTrustBundle: one object, Name, with spec.signerName certapi.dev/serving, which pods mount with a
// clusterTrustBundle projected volume (by name, or by signerName). It holds the bundle in the canonical
// form every injected target holds (cabundle.Canonical: parsed, deduplicated, in order), is written only
// when it differs, with cabundle's guarded write (a JSON patch that tests the resourceVersion, under
// field manager certapi), and is re-created if deleted. It is a rotation target like every injected
// object: the gate waits until it holds the bundle (AllHold).
//
// Writing a ClusterTrustBundle with a signerName needs the "attest" verb on signers/certapi.dev/serving
// (certificates.k8s.io), besides create, patch, get, list and watch on clustertrustbundles.
//
// The shape is kubernetes' rootcacertpublisher: an informer (on this one object, by a field selector),
// the term's queue, and one sync function.
package trustbundle

import (
	"context"
	"errors"
	"fmt"
	"sync"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cabundle"
	"github.com/certapi/certapi/pkg/controller"
)

// Name is the ClusterTrustBundle certapi keeps (certapiv1alpha1.ClusterTrustBundleName).
const Name = certapiv1alpha1.ClusterTrustBundleName

// BundleSource gives the trust bundle to publish and says when it changes (the issuer; one type for every reader).
type BundleSource = controller.BundleSource

// Options configure New.
type Options struct {
	// Context is the leadership term's. Required.
	Context *controller.Context
	// Source gives the bundle and tells when it changes. Required.
	Source BundleSource
}

// Publisher keeps the ClusterTrustBundle. Make one per leadership term with New; the term runs it. It is
// a controller.Notifier: its listeners are told after each sync, when the bundle's state may have
// changed (the rotation gate listens).
type Publisher struct {
	source  BundleSource
	kube    kubernetes.Interface
	lister  certificateslisters.ClusterTrustBundleLister
	queue   *controller.Queue[string]
	changes controller.Listeners
	// synced reports whether the term's handler has seen the informer's first list.
	synced cache.InformerSynced

	mu sync.Mutex
	// problem is why the last sync failed; "" when it did not.
	problem string
}

// New checks o and declares on the term's Context an informer on the one ClusterTrustBundle and the
// Source's listener.
func New(o Options) (*Publisher, error) {
	switch {
	case o.Context == nil:
		return nil, errors.New("trustbundle: Options.Context is required")
	case o.Source == nil:
		return nil, errors.New("trustbundle: Options.Source is required")
	}
	factory := informers.NewSharedInformerFactoryWithOptions(o.Context.Kube, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", Name).String()
		}),
		informers.WithTransform(func(obj any) (any, error) {
			if b, ok := obj.(*certificatesv1.ClusterTrustBundle); ok {
				b.ManagedFields = nil
			}
			return obj, nil
		}))
	inf := factory.Certificates().V1().ClusterTrustBundles()
	p := &Publisher{
		source: o.Source,
		kube:   o.Context.Kube,
		lister: inf.Lister(),
	}
	o.Context.AddFactory(factory)
	p.queue = controller.NewQueue(controller.QueueOptions[string]{
		Name: "trustbundle", Workers: 1, Sync: p.sync,
		Quiet: func(err error) bool { return stale(err) || apierrors.IsAlreadyExists(err) },
	})
	p.synced = o.Context.Watch(inf.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { p.enqueue() },
		UpdateFunc: func(any, any) { p.enqueue() },
		DeleteFunc: func(any) { p.enqueue() },
	})
	o.Context.Listen(o.Source, p.enqueue)
	p.enqueue() // looked at once the caches have synced, whatever they hold
	return p, nil
}

// enqueue makes the publisher look at the ClusterTrustBundle again.
func (p *Publisher) enqueue() { p.queue.Add(Name) }

// Run keeps the ClusterTrustBundle until ctx ends: the term calls it once every cache has synced. Its
// run is its queue's, which runs once.
func (p *Publisher) Run(ctx context.Context) error { return p.queue.Run(ctx) }

// ShutDown stops the queue of a Publisher whose term ended before it ran.
func (p *Publisher) ShutDown() { p.queue.ShutDown() }

// AddListener tells lis after each sync (controller.Notifier).
func (p *Publisher) AddListener(lis dynamiccertificates.Listener) (remove func()) {
	return p.changes.AddListener(lis)
}

// Action is what sync does to the ClusterTrustBundle.
type Action string

// Actions.
const (
	ActionNone   Action = "None"
	ActionCreate Action = "Create"
	ActionUpdate Action = "Update"
	// ActionWait: the object is being deleted; the informer brings its deletion, then it is created.
	ActionWait Action = "Wait"
)

// Decide says what to do with the ClusterTrustBundle cur (nil when there is none) to make it hold the
// canonical bundle want.
func Decide(cur *certificatesv1.ClusterTrustBundle, want string) Action {
	switch {
	case cur == nil:
		return ActionCreate
	case cur.DeletionTimestamp != nil:
		return ActionWait
	case cur.Spec.TrustBundle != want:
		return ActionUpdate
	}
	return ActionNone
}

func (p *Publisher) sync(ctx context.Context, _ string) (controller.Result, error) {
	defer p.changes.Notify()
	want, ok, err := p.want()
	if err != nil {
		p.setProblem("the CA bundle does not parse, so the ClusterTrustBundle is not written: " + err.Error())
		return controller.Result{}, nil // the next bundle change triggers again
	}
	if !ok {
		return controller.Result{}, nil
	}
	cur, err := p.lister.Get(Name)
	if apierrors.IsNotFound(err) {
		cur, err = nil, nil
	}
	if err != nil {
		return controller.Result{}, fmt.Errorf("reading ClusterTrustBundle %s from the cache: %w", Name, err)
	}
	logger := klog.FromContext(ctx)
	switch Decide(cur, want) {
	case ActionCreate:
		b := &certificatesv1.ClusterTrustBundle{
			ObjectMeta: metav1.ObjectMeta{Name: Name},
			Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: certapiv1alpha1.PodCertificateSignerName, TrustBundle: want},
		}
		if _, err := p.kube.CertificatesV1().ClusterTrustBundles().Create(ctx, b, metav1.CreateOptions{FieldManager: certapiv1alpha1.FieldManager}); err != nil {
			if !apierrors.IsAlreadyExists(err) { // the informer has not seen it yet: retried
				p.setProblem(fmt.Sprintf("creating ClusterTrustBundle %s: %v", Name, err))
			}
			return controller.Result{}, fmt.Errorf("creating ClusterTrustBundle %s: %w", Name, err)
		}
		logger.V(2).Info("Created the ClusterTrustBundle", "name", Name)
	case ActionUpdate:
		// Guarded by the resourceVersion of the cached copy: a change since makes it fail (422), and
		// the informer brings the change back here.
		patch := cabundle.GuardedPatch(cur.ResourceVersion, cabundle.Op{Op: "replace", Path: "/spec/trustBundle", Value: want})
		if _, err := cabundle.Patch(ctx, p.kube.CertificatesV1().ClusterTrustBundles(), Name, patch); err != nil {
			if !stale(err) {
				p.setProblem(fmt.Sprintf("updating ClusterTrustBundle %s: %v", Name, err))
			}
			return controller.Result{}, fmt.Errorf("updating ClusterTrustBundle %s: %w", Name, err)
		}
		logger.V(2).Info("Updated the ClusterTrustBundle", "name", Name)
	}
	p.setProblem("")
	return controller.Result{}, nil
}

// stale reports whether a write failed because the object changed since it was read: a conflict, or the
// patch's resourceVersion test failing (422).
func stale(err error) bool {
	return cabundle.Classify(err) == cabundle.Stale
}

// want is the canonical bundle; ok=false when the Source has none.
func (p *Publisher) want() (string, bool, error) {
	raw, ok := p.source.Bundle()
	if !ok || len(raw) == 0 {
		return "", false, nil
	}
	s, err := canonical(raw)
	return s, err == nil, err
}

// canonical is the bundle as every target is written (cabundle.Canonical).
func canonical(raw []byte) (string, error) {
	b, err := cabundle.Canonical(raw)
	return string(b.PEM), err
}

func (p *Publisher) setProblem(msg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.problem = msg
}

// Problem is why the ClusterTrustBundle could not be written last time; "" when it could.
func (p *Publisher) Problem() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.problem
}

// HasSynced reports whether the term's handler has seen the first list of the ClusterTrustBundle.
func (p *Publisher) HasSynced() bool { return p.synced != nil && p.synced() }

// Holds reports whether the ClusterTrustBundle, as the informer last saw it, holds exactly bundle (in
// canonical form): the rotation gate. It is false before the informer has synced and for a bundle that
// does not parse.
func (p *Publisher) Holds(bundle []byte) bool {
	if !p.HasSynced() {
		return false
	}
	want, err := canonical(bundle)
	if err != nil {
		return false
	}
	cur, err := p.lister.Get(Name)
	return err == nil && Decide(cur, want) == ActionNone
}

// AllHold is Holds: the ClusterTrustBundle is one target of the rotation (see rotation.Target).
func (p *Publisher) AllHold(bundle []byte) bool { return p.Holds(bundle) }

// InjectionSummary counts the ClusterTrustBundle as one injection target, up to date or pending (see
// UpToDate).
func (p *Publisher) InjectionSummary() certapiv1alpha1.InjectionSummary {
	s := certapiv1alpha1.InjectionSummary{Targets: 1}
	if p.UpToDate() {
		s.UpToDate = 1
	}
	return s
}

// UpToDate reports whether the ClusterTrustBundle holds the Source's current certificates, in any
// order: for the injection summary. When a rotation's Next CA becomes Active only the bundle's order
// changes, and the ClusterTrustBundle trusts exactly what the new bundle does while it is re-written;
// counting it as pending then made the summary written with the switch read "3 of 4". The rotation
// gate uses Holds, which is exact.
func (p *Publisher) UpToDate() bool {
	raw, ok := p.source.Bundle()
	if !ok || !p.HasSynced() {
		return false
	}
	cur, err := p.lister.Get(Name)
	return err == nil && cabundle.SameCertificates([]byte(cur.Spec.TrustBundle), raw)
}
