// Package secretdelivery is the leader-only controller that delivers certificates into Secrets for
// ServingCertRequests with spec.secretName: it creates the kubernetes.io/tls Secret when it is missing,
// re-creates it when it is deleted, renews it in place at its renewal time (and when the CA bundle, the
// signing CA or the request's spec changes), and leaves every Secret it does not own untouched,
// reporting the conflict on the request.
//
// It watches only certapi's own Secrets (label certapi.dev/managed=true), never every Secret in the
// cluster, and its cache keeps a small summary of each (see secretView): no private key, and nothing
// that grows with the size of a Secret someone else labelled. By default (the labelled-namespaces
// scope) it delivers only into namespaces that opted in (label certapi.dev/secret-delivery=enabled and a
// RoleBinding to the secret-delivery ClusterRole), with one Secret informer per such namespace
// (namespaces.go); with --secret-delivery-scope=cluster, into every namespace, with one informer.
package secretdelivery

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/deliveryscope"
	certapilisters "github.com/certapi/certapi/pkg/generated/listers/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/issuer"
)

// ReportingController is the reportingController of the Events this controller records when it makes
// its own recorder.
const ReportingController = "certapi.dev/secret-delivery"

// secretNameIndex indexes ServingCertRequests by "<namespace>/<spec.secretName>", so that an event on a
// Secret reaches every request that names it, not only the one its annotation names.
const secretNameIndex = "certapi.dev/secret-delivery-secretName"

// Timing. Not options: they are part of the behaviour the design promises.
const (
	// Failed syncs (API errors) back off per request from errorBackoffBase to errorBackoffMax.
	errorBackoffBase = 500 * time.Millisecond
	errorBackoffMax  = 5 * time.Minute
	// A request in conflict is looked at again at once on any change to the request or to its Secret:
	// a certapi Secret through the cache, any other through a watch of that Secret alone
	// (conflictwatch.go). Only beyond maxConflictWatches is it looked at again on a timer, from
	// conflictBackoffBase to conflictBackoffMax.
	conflictBackoffBase = 2 * time.Second
	conflictBackoffMax  = time.Minute
	// DefaultWorkers is the number of Secrets delivered concurrently when Options.Workers is zero. The
	// work is mostly waiting for kube-apiserver (and, for RSA keys, key generation).
	DefaultWorkers = 8
)

// Options configures New.
type Options struct {
	// Context is the leadership term's: its Kube client (Secrets: get, list, watch, create, patch in
	// every namespace that opted in, or in every namespace in the cluster scope; namespaces: list and
	// watch), its certapi informers and its Event recorders. Required. Delivering many Secrets at once
	// needs a client QPS well above client-go's default of 5.
	Context *controller.Context
	// Policy says where Secrets are delivered; the zero value is the labelled-namespaces scope, with
	// certapi's ServiceAccount described in words in the instructions.
	Policy deliveryscope.Policy
	// Authority signs, only while it says ok, and tells the controller when the CA or bundle changes.
	// Required.
	Authority issuer.Authority
	// Status writes the requests' status. Required. The caller runs it (Status.Run).
	Status *status.Writer
	// Clock gives "now" for renewal decisions; default the real clock.
	Clock clock.PassiveClock
	// Workers is the number of requests handled concurrently; default DefaultWorkers.
	Workers int
}

// Controller delivers certificates into Secrets. Make one with New for each leadership term; the term
// runs it. It is a controller.Notifier: its listeners are told after a labelled Secret changes or a
// request is deleted, when what a pending distrust waits for may have changed (the rotation listens).
type Controller struct {
	kube      kubernetes.Interface
	authority issuer.Authority
	status    *status.Writer
	clock     clock.PassiveClock
	recorder  events.EventRecorder
	// clusterDomain gives the second SAN of every certificate, which decide compares.
	clusterDomain string

	requestInformer cache.SharedIndexInformer
	requests        certapilisters.ServingCertRequestLister
	// policy says where Secrets are delivered, and what to tell a namespace that has not opted in.
	policy deliveryscope.Policy
	// secrets is the cache of certapi's Secrets: clusterSecrets over secretInformer in the cluster scope,
	// namespaceSecrets (also nsSecrets) in the labelled-namespaces scope.
	secrets secretCaches
	// secretInformer's store holds a *secretView per labelled Secret (its transform is viewSecret); the
	// cluster scope's only.
	secretInformer cache.SharedIndexInformer
	// nsSecrets and nsQueue, in the labelled-namespaces scope only, keep one Secret informer per
	// opted-in namespace: nsQueue starts and stops them as namespaces gain and lose the label.
	nsSecrets *namespaceSecrets
	nsQueue   *controller.Queue[string]

	queue           *controller.Queue[types.NamespacedName]
	conflictBackoff workqueue.TypedRateLimiter[types.NamespacedName]
	conflicts       *conflictWatches

	mu       sync.Mutex
	reported map[types.NamespacedName]string // the conflict last reported per request
	// readFirst holds the new requests whose Secret must be read before it is written: a create that
	// took it for absent found one of that name (see mayAssumeAbsent).
	readFirst map[types.NamespacedName]struct{}
	// seenCA and seenBundle are the signing CA and bundle the Secrets were last examined against.
	seenCA, seenBundle []byte
	// notSigning holds the requests looked at while the Authority could not sign (the lease is not known
	// alive, or the CA is not loaded yet); the Authority's next change enqueues them again.
	notSigning map[types.NamespacedName]struct{}

	// changes tells the listeners (see AddListener).
	changes controller.Listeners
	// log is Run's logger (see logger).
	log atomic.Pointer[logr.Logger]
}

// New checks o and builds a Controller. It declares on the term's Context what the controller watches
// (the term's ServingCertRequest informer, with an index on it, and a filtered Secret informer of its
// own) and that it listens to the Authority; nothing runs until the term does.
func New(o Options) (*Controller, error) {
	switch {
	case o.Context == nil:
		return nil, errors.New("secretdelivery: Options.Context is required")
	case o.Authority == nil:
		return nil, errors.New("secretdelivery: Options.Authority is required")
	case o.Status == nil:
		return nil, errors.New("secretdelivery: Options.Status is required")
	case o.Context.ClusterDomain == "":
		return nil, errors.New("secretdelivery: Options.Context.ClusterDomain is required")
	case o.Workers < 0:
		return nil, fmt.Errorf("secretdelivery: Options.Workers is %d; expected 0 (default %d) or more", o.Workers, DefaultWorkers)
	}
	c := &Controller{
		kube:       o.Context.Kube,
		authority:  o.Authority,
		status:     o.Status,
		clock:      o.Clock,
		recorder:   o.Context.Recorder(ReportingController),
		reported:   map[types.NamespacedName]string{},
		readFirst:  map[types.NamespacedName]struct{}{},
		notSigning: map[types.NamespacedName]struct{}{},
		policy:     o.Policy,

		clusterDomain: o.Context.ClusterDomain,
	}
	if c.policy.Scope == "" {
		c.policy.Scope = deliveryscope.LabelledNamespaces
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	workers := o.Workers
	if workers == 0 {
		workers = DefaultWorkers
	}

	reqInformer := o.Context.CertapiInformers.Certapi().V1alpha1().ServingCertRequests()
	c.requestInformer = reqInformer.Informer()
	c.requests = reqInformer.Lister()
	if _, ok := c.requestInformer.GetIndexer().GetIndexers()[secretNameIndex]; !ok {
		if err := c.requestInformer.AddIndexers(cache.Indexers{secretNameIndex: indexBySecretName}); err != nil {
			return nil, fmt.Errorf("secretdelivery: adding the secretName index to the ServingCertRequest informer: %w", err)
		}
	}

	secretHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onSecret,
		UpdateFunc: func(oldObj, newObj any) { c.onSecret(oldObj); c.onSecret(newObj) },
		DeleteFunc: c.onSecret,
	}
	if c.policy.Scope == deliveryscope.Cluster {
		// Only certapi's Secrets, each reduced to its secretView: memory stays small whatever the Secrets
		// hold, and no private key sits in the cache. The store holds secretViews, so there is no lister.
		secretFactory := informers.NewSharedInformerFactoryWithOptions(c.kube, 0,
			informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = certapiv1alpha1.LabelManaged + "=true" }),
			informers.WithTransform(viewSecret))
		c.secretInformer = secretFactory.Core().V1().Secrets().Informer()
		c.secrets = clusterSecrets{informer: c.secretInformer}
		o.Context.AddFactory(secretFactory)
		o.Context.Watch(c.secretInformer, secretHandler)
	} else {
		// The opted-in namespaces (declared: the term waits for them), and a Secret informer per such
		// namespace, started by nsQueue once the controller runs.
		ns, nsFactory := newNamespaceSecrets(c.kube)
		ns.handler = secretHandler
		ns.changed = c.enqueueNamespace
		c.nsSecrets, c.secrets = ns, ns
		c.nsQueue = controller.NewQueue(controller.QueueOptions[string]{
			Name:    "secretdelivery-namespaces",
			Workers: 1,
			Sync: func(ctx context.Context, namespace string) (controller.Result, error) {
				ns.sync(ctx, namespace)
				return controller.Result{}, nil
			},
		})
		o.Context.AddFactory(nsFactory)
		o.Context.Watch(ns.namespaces, cache.ResourceEventHandlerFuncs{
			AddFunc:    c.onNamespace,
			UpdateFunc: func(_, newObj any) { c.onNamespace(newObj) },
			DeleteFunc: c.onNamespace,
		})
	}

	c.queue = controller.NewQueue(controller.QueueOptions[types.NamespacedName]{
		Name:        "secretdelivery",
		Workers:     workers,
		Sync:        c.sync,
		BackoffBase: errorBackoffBase,
		BackoffMax:  errorBackoffMax,
		// The Secret changed under us; the cache catches up and the retry decides afresh.
		Quiet: func(err error) bool {
			// A refusal (forbidden) is reported on the request's Ready condition instead.
			return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err)
		},
	})
	c.conflictBackoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](conflictBackoffBase, conflictBackoffMax)
	c.conflicts = newConflictWatches(c.kube, c.enqueueForSecret)

	cc := o.Context
	cc.Watch(c.requestInformer, cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onRequestAdd,
		UpdateFunc: c.onRequestUpdate,
		DeleteFunc: c.onRequestDelete,
	})
	// The initial lists enqueue every request; from then on a new CA or bundle re-examines them all.
	c.authorityChanged()
	cc.Listen(o.Authority, c.onAuthority)
	return c, nil
}

// indexBySecretName is the secretNameIndex function.
func indexBySecretName(obj any) ([]string, error) {
	req, ok := obj.(*certapiv1alpha1.ServingCertRequest)
	if !ok || req.Spec.SecretName == "" {
		return nil, nil
	}
	return []string{req.Namespace + "/" + req.Spec.SecretName}, nil
}

// Run delivers certificates until ctx ends (when this replica stops leading): the term calls it once
// every cache has synced. Its run is its queue's, which runs once, and in the labelled-namespaces scope
// also the namespace queue's, whose Secret informers it stops before it returns.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	c.log.Store(&logger)
	if c.nsSecrets == nil {
		return c.queue.Run(ctx)
	}
	defer c.nsSecrets.stopAll()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nsErr := make(chan error, 1)
	go func() {
		nsErr <- c.nsQueue.Run(ctx)
		cancel()
	}()
	err := c.queue.Run(ctx)
	cancel()
	return errors.Join(err, <-nsErr)
}

// ShutDown stops the queues of a controller whose term ended before it ran.
func (c *Controller) ShutDown() {
	c.queue.ShutDown()
	if c.nsQueue != nil {
		c.nsQueue.ShutDown()
	}
}

// AddListener tells lis after a labelled Secret changed or a request was deleted (controller.Notifier).
func (c *Controller) AddListener(lis dynamiccertificates.Listener) (remove func()) {
	return c.changes.AddListener(lis)
}
