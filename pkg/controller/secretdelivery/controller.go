// Package secretdelivery is the leader-only controller that delivers certificates into Secrets for
// ServingCertRequests with spec.secretName: it creates the kubernetes.io/tls Secret when it is missing,
// re-creates it when it is deleted, renews it in place at its renewal time (and when the CA bundle, the
// signing CA or the request's spec changes), and leaves every Secret it does not own untouched,
// reporting the conflict on the request.
//
// It watches only certapi's own Secrets (label certapi.dev/managed=true), never every Secret in the
// cluster, and keeps no private key in its cache: see trimSecret.
package secretdelivery

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/generated/informers/externalversions"
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
	// authorityPollInterval is how often Run asks the Authority whether its bundle or signing CA changed
	// (issuer.Authority has no change notification); a change re-examines every request's Secret.
	authorityPollInterval = time.Second
	// notSigningRetry is how soon a request is looked at again when the Authority cannot sign (this
	// replica is losing leadership, or the new leader has not loaded its CA yet).
	notSigningRetry = 2 * time.Second
	// Failed syncs (API errors) back off per request from errorBackoffBase to errorBackoffMax.
	errorBackoffBase = 500 * time.Millisecond
	errorBackoffMax  = 5 * time.Minute
	// A request in conflict is looked at again from conflictBackoffBase to conflictBackoffMax, besides
	// at once on any change to the request or to a certapi Secret of that name. A foreign Secret is not
	// in the cache, so its deletion or hand-over is noticed within conflictBackoffMax.
	conflictBackoffBase = 2 * time.Second
	conflictBackoffMax  = time.Minute
	// DefaultWorkers is the number of Secrets delivered concurrently when Options.Workers is zero. The
	// work is mostly waiting for kube-apiserver (and, for RSA keys, key generation).
	DefaultWorkers = 8
)

// Options configures New.
type Options struct {
	// Kube is the kube-apiserver clientset: Secrets (get, list, watch, create, patch in every namespace
	// that has ServingCertRequests) and, when Recorder is nil, events.k8s.io Events (create, patch).
	// Required. Delivering many Secrets at once needs a client QPS well above client-go's default of 5.
	Kube kubernetes.Interface
	// Certapi is certapi's own clientset. Used only to make an informer factory when Informers is nil.
	Certapi versioned.Interface
	// Informers, when set, provides the ServingCertRequest informer, and the caller starts it (after New,
	// which registers the informer, and with a context that may outlive this leadership term); Run
	// neither starts nor stops a factory it did not make, and returns an error if the informer has
	// stopped. When nil (simplest: nothing outlives the term), New makes a private factory from Certapi
	// and Run starts it and shuts it down.
	Informers externalversions.SharedInformerFactory
	// Authority signs; only while it says ok. Required.
	Authority issuer.Authority
	// Status writes the requests' status. Required. The caller runs it (Status.Run).
	Status *status.Writer
	// ClusterDomain, e.g. "cluster.local", gives the second SAN of every certificate. Required.
	ClusterDomain string
	// Clock gives "now" for issuance and renewal decisions; default the real clock.
	Clock clock.PassiveClock
	// Recorder records the Events on requests (Issued, Renewed, SecretConflict, ...). When nil, New makes
	// an events.k8s.io/v1 recorder on Kube with ReportingController, and Run starts and stops it.
	Recorder events.EventRecorder
	// Workers is the number of requests handled concurrently; default DefaultWorkers.
	Workers int
	// MaxDuration, when positive, caps every certificate's lifetime: the CA rotation keeps a Retiring CA
	// trusted for this long, so no certificate may outlive it.
	MaxDuration time.Duration
	// OnIssued, when set, is called after every certificate delivered into a Secret (for metrics).
	// It must not block.
	OnIssued func(namespace, name string, notAfter, renewal time.Time)
}

// Controller delivers certificates into Secrets. Make one with New for each leadership term and call
// Run once.
type Controller struct {
	kube          kubernetes.Interface
	authority     issuer.Authority
	status        *status.Writer
	clusterDomain string
	clock         clock.PassiveClock
	recorder      events.EventRecorder // set by Run when the caller gave none
	maxDuration   time.Duration
	broadcaster   events.EventBroadcaster // made by Run when the caller gave no recorder
	workers       int
	onIssued      func(namespace, name string, notAfter, renewal time.Time)

	informers       externalversions.SharedInformerFactory
	ownsInformers   bool // informers was made by New, so Run shuts it down
	requestInformer cache.SharedIndexInformer
	requests        certapilisters.ServingCertRequestLister
	secretFactory   informers.SharedInformerFactory
	secretInformer  cache.SharedIndexInformer
	secrets         corelisters.SecretLister

	queue           workqueue.TypedRateLimitingInterface[types.NamespacedName]
	conflictBackoff workqueue.TypedRateLimiter[types.NamespacedName]

	mu       sync.Mutex
	reported map[types.NamespacedName]string // the conflict last reported per request

	ran atomic.Bool
}

// New checks o and builds a Controller. It registers the ServingCertRequest informer with o.Informers
// (and an index on it) and makes the filtered Secret informer; nothing runs until Run.
func New(o Options) (*Controller, error) {
	switch {
	case o.Kube == nil:
		return nil, errors.New("secretdelivery: Options.Kube is required")
	case o.Informers == nil && o.Certapi == nil:
		return nil, errors.New("secretdelivery: Options.Informers or Options.Certapi is required")
	case o.Authority == nil:
		return nil, errors.New("secretdelivery: Options.Authority is required")
	case o.Status == nil:
		return nil, errors.New("secretdelivery: Options.Status is required")
	case o.ClusterDomain == "":
		return nil, errors.New("secretdelivery: Options.ClusterDomain is required")
	case o.Workers < 0:
		return nil, fmt.Errorf("secretdelivery: Options.Workers is %d; expected 0 (default %d) or more", o.Workers, DefaultWorkers)
	}
	c := &Controller{
		kube:          o.Kube,
		authority:     o.Authority,
		status:        o.Status,
		clusterDomain: o.ClusterDomain,
		clock:         o.Clock,
		recorder:      o.Recorder,
		maxDuration:   o.MaxDuration,
		workers:       o.Workers,
		onIssued:      o.OnIssued,
		informers:     o.Informers,
		reported:      map[types.NamespacedName]string{},
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	if c.workers == 0 {
		c.workers = DefaultWorkers
	}
	if c.informers == nil {
		// The cache keeps what the controller reads: spec, metadata and conditions. managedFields and
		// the issued certificate in status are most of each object and are dropped, so 10,000 requests
		// cost little beyond the API server's own watch cache.
		c.informers = externalversions.NewSharedInformerFactoryWithOptions(o.Certapi, 0, externalversions.WithTransform(trimRequest))
		c.ownsInformers = true
	}

	reqInformer := c.informers.Certapi().V1alpha1().ServingCertRequests()
	c.requestInformer = reqInformer.Informer()
	c.requests = reqInformer.Lister()
	// A previous term's Controller on the same shared informer may have added the index already.
	if _, ok := c.requestInformer.GetIndexer().GetIndexers()[secretNameIndex]; !ok {
		if err := c.requestInformer.AddIndexers(cache.Indexers{secretNameIndex: indexBySecretName}); err != nil {
			return nil, fmt.Errorf("secretdelivery: adding the secretName index to the ServingCertRequest informer: %w", err)
		}
	}

	// Only certapi's Secrets, with tls.key replaced by a marker: memory stays small, and no private key
	// sits in the cache.
	c.secretFactory = informers.NewSharedInformerFactoryWithOptions(o.Kube, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = LabelManaged + "=true" }),
		informers.WithTransform(trimSecret))
	secretInformer := c.secretFactory.Core().V1().Secrets()
	c.secretInformer = secretInformer.Informer()
	c.secrets = secretInformer.Lister()

	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](errorBackoffBase, errorBackoffMax),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "secretdelivery"})
	c.conflictBackoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](conflictBackoffBase, conflictBackoffMax)
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

// Run delivers certificates until ctx ends (when this replica stops leading), then stops every goroutine
// it started and returns nil. It starts its own informers (see Options.Informers), waits for the caches,
// and returns an error if it cannot watch (for example, the ServingCertRequest informer has stopped).
// Run may be called once.
func (c *Controller) Run(ctx context.Context) error {
	if !c.ran.CompareAndSwap(false, true) {
		return errors.New("secretdelivery: Run called twice; make a new Controller for each leadership term")
	}
	logger := klog.FromContext(ctx).WithName("secretdelivery")
	ctx = klog.NewContext(ctx, logger)

	// Shut down in reverse order of start: the deferred calls run after cancel, when the informers'
	// goroutines can end.
	defer c.secretFactory.Shutdown()
	if c.ownsInformers {
		defer c.informers.Shutdown()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer c.queue.ShutDown()

	if c.recorder == nil {
		// Made here, not in New: a broadcaster runs a goroutine from the moment it exists.
		c.broadcaster = events.NewBroadcaster(&events.EventSinkImpl{Interface: c.kube.EventsV1()})
		c.recorder = c.broadcaster.NewRecorder(kubescheme.Scheme, ReportingController)
		if err := c.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
			return fmt.Errorf("secretdelivery: starting the event recorder: %w", err)
		}
		defer c.broadcaster.Shutdown()
	}

	reqReg, err := c.requestInformer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onRequestAdd,
		UpdateFunc: c.onRequestUpdate,
		DeleteFunc: c.onRequestDelete,
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return fmt.Errorf("secretdelivery: watching ServingCertRequests: %w", err)
	}
	defer func() { _ = c.requestInformer.RemoveEventHandler(reqReg) }()
	secReg, err := c.secretInformer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onSecret,
		UpdateFunc: func(oldObj, newObj any) { c.onSecret(oldObj); c.onSecret(newObj) },
		DeleteFunc: c.onSecret,
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return fmt.Errorf("secretdelivery: watching Secrets: %w", err)
	}
	defer func() { _ = c.secretInformer.RemoveEventHandler(secReg) }()

	if c.ownsInformers {
		c.informers.Start(ctx.Done())
	}
	c.secretFactory.Start(ctx.Done())
	slow := time.AfterFunc(30*time.Second, func() {
		logger.Info("Still waiting for the ServingCertRequest and Secret caches; was Options.Informers started?")
	})
	synced := cache.WaitFor(ctx, "secretdelivery caches", reqReg.HasSyncedChecker(), secReg.HasSyncedChecker())
	slow.Stop()
	if !synced {
		if c.requestInformer.IsStopped() {
			return errors.New("secretdelivery: the ServingCertRequest informer has stopped; start Options.Informers with a context that outlives the leadership term")
		}
		return nil // ctx ended
	}
	logger.Info("Delivering certificates into Secrets", "workers", c.workers)

	var wg sync.WaitGroup
	for range c.workers {
		wg.Go(func() {
			for c.processNext(ctx) {
			}
		})
	}
	wg.Go(func() { c.watchAuthority(ctx) })
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	logger.Info("Stopped delivering certificates into Secrets")
	return nil
}

// watchAuthority polls the Authority until ctx ends and enqueues every request with a Secret when the
// bundle or the signing CA changes (a CA rotation step, or a new leader's CA): decide then re-issues the
// Secrets whose ca.crt or issuer is out of date. The first observation only sets the baseline, since the
// initial list enqueues every request anyway.
func (c *Controller) watchAuthority(ctx context.Context) {
	var (
		lastBundle []byte
		lastCA     []byte
		seen       bool
	)
	ticker := time.NewTicker(authorityPollInterval)
	defer ticker.Stop()
	for {
		if ca, bundle, ok := c.authority.Signing(); ok && ca != nil && ca.Certificate != nil {
			if seen && (!bytes.Equal(bundle, lastBundle) || !bytes.Equal(ca.Certificate.Raw, lastCA)) {
				n := c.enqueueAll()
				klog.FromContext(ctx).Info("CA bundle or signing CA changed; re-examining every delivered Secret", "requests", n)
			}
			lastBundle, lastCA, seen = bytes.Clone(bundle), bytes.Clone(ca.Certificate.Raw), true
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// enqueueAll enqueues every request with a spec.secretName and returns how many.
func (c *Controller) enqueueAll() int {
	n := 0
	for _, obj := range c.requestInformer.GetStore().List() {
		if req, ok := obj.(*certapiv1alpha1.ServingCertRequest); ok && req.Spec.SecretName != "" {
			c.queue.Add(keyOf(req))
			n++
		}
	}
	return n
}

// onRequestAdd enqueues a new (or, at start, every) request with a Secret to deliver into, and one whose
// Ready condition still reports a Secret conflict.
func (c *Controller) onRequestAdd(obj any) {
	req, ok := obj.(*certapiv1alpha1.ServingCertRequest)
	if !ok {
		return
	}
	if req.Spec.SecretName != "" || readyReason(req) == status.ReasonSecretConflict {
		c.queue.Add(keyOf(req))
	}
}

// onRequestUpdate enqueues a request when its spec changed or on a resync. Status-only updates, most of
// them this controller's own, are ignored.
func (c *Controller) onRequestUpdate(oldObj, newObj any) {
	oldReq, ok1 := oldObj.(*certapiv1alpha1.ServingCertRequest)
	newReq, ok2 := newObj.(*certapiv1alpha1.ServingCertRequest)
	if !ok1 || !ok2 {
		return
	}
	if oldReq.Generation == newReq.Generation && oldReq.ResourceVersion != newReq.ResourceVersion {
		return
	}
	if newReq.Spec.SecretName != "" || oldReq.Spec.SecretName != "" {
		c.queue.Add(keyOf(newReq))
	}
}

// onRequestDelete forgets what was reported for a deleted request. Its Secret stays as it is.
func (c *Controller) onRequestDelete(obj any) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		return
	}
	c.forgetConflict(types.NamespacedName{Namespace: key.Namespace, Name: key.Name})
}

// onSecret enqueues the request a certapi Secret's annotation names and every request whose
// spec.secretName names it, so that a deleted Secret is re-created within moments and a Secret that
// another request gave up is taken over.
func (c *Controller) onSecret(obj any) {
	var s *corev1.Secret
	switch o := obj.(type) {
	case *corev1.Secret:
		s = o
	case cache.DeletedFinalStateUnknown:
		if ds, ok := o.Obj.(*corev1.Secret); ok {
			s = ds
		} else if ns, name, err := cache.SplitMetaNamespaceKey(o.Key); err == nil {
			c.enqueueForSecret(ns, name)
		}
	}
	if s == nil {
		return
	}
	if owner := s.Annotations[AnnotationServingCertRequest]; owner != "" {
		c.queue.Add(types.NamespacedName{Namespace: s.Namespace, Name: owner})
	}
	c.enqueueForSecret(s.Namespace, s.Name)
}

// enqueueForSecret enqueues every request whose spec.secretName is namespace/name.
func (c *Controller) enqueueForSecret(namespace, name string) {
	objs, err := c.requestInformer.GetIndexer().ByIndex(secretNameIndex, namespace+"/"+name)
	if err != nil {
		return
	}
	for _, o := range objs {
		if req, ok := o.(*certapiv1alpha1.ServingCertRequest); ok {
			c.queue.Add(keyOf(req))
		}
	}
}

// result says when to look at a request again.
type result struct {
	// after, when positive, re-queues the request after that long.
	after time.Duration
	// conflict re-queues the request with the conflict backoff.
	conflict bool
}

// processNext handles one queued request; false means the queue is shut down.
func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)

	res, err := c.sync(ctx, key)
	switch {
	case err != nil:
		logger := klog.FromContext(ctx)
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) {
			// The Secret changed under us; the cache catches up and the retry decides afresh.
			logger.V(2).Info("Secret changed while delivering; retrying", "request", key, "err", err)
		} else {
			logger.Error(err, "Delivering certificate into Secret", "request", key)
		}
		c.queue.AddRateLimited(key)
	case res.conflict:
		c.queue.Forget(key)
		c.queue.AddAfter(key, c.conflictBackoff.When(key))
	default:
		c.queue.Forget(key)
		c.conflictBackoff.Forget(key)
		if res.after > 0 {
			c.queue.AddAfter(key, res.after)
		}
	}
	return true
}

// sync brings one request's Secret up to date.
func (c *Controller) sync(ctx context.Context, key types.NamespacedName) (result, error) {
	req, err := c.requests.ServingCertRequests(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.forgetConflict(key) // deleted: its Secret stays, no longer renewed
		return result{}, nil
	}
	if err != nil {
		return result{}, fmt.Errorf("getting ServingCertRequest %s from the cache: %w", key, err)
	}
	if req.DeletionTimestamp != nil {
		return result{}, nil
	}
	if req.Spec.SecretName == "" {
		c.clearStaleConflict(req)
		return result{}, nil
	}
	ca, bundle, ok := c.authority.Signing()
	if !ok || ca == nil {
		return result{after: notSigningRetry}, nil
	}
	secret, err := c.getSecret(ctx, req.Namespace, req.Spec.SecretName)
	if err != nil {
		return result{}, err
	}
	now := c.clock.Now()
	d := decide(decideInput{
		Request:       req,
		Secret:        secret,
		CA:            ca.Certificate,
		Bundle:        bundle,
		ClusterDomain: c.clusterDomain,
		Now:           now,
	})
	klog.FromContext(ctx).V(4).Info("Decided", "request", key, "secret", req.Spec.SecretName, "action", d.Action, "why", d.Why)
	switch d.Action {
	case actionNone:
		c.markCurrent(req, d)
		return result{after: d.RenewAt.Sub(now)}, nil
	case actionConflict:
		c.reportConflict(req, secret, d.Conflict)
		return result{conflict: true}, nil
	case actionCreate, actionIssue:
		renewAt, err := c.deliver(ctx, req, secret, ca, bundle, now, d)
		if err != nil {
			return result{}, err
		}
		return result{after: renewAt.Sub(now)}, nil
	}
	return result{}, nil
}

// getSecret returns namespace/name, trimmed (see trimSecret), or nil when it does not exist. A certapi
// Secret comes from the cache; any other is read directly, since the cache holds only certapi's.
func (c *Controller) getSecret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	s, err := c.secrets.Secrets(namespace).Get(name)
	if err == nil {
		return s, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("getting Secret %s/%s from the cache: %w", namespace, name, err)
	}
	s, err = c.kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting Secret %s/%s: %w", namespace, name, err)
	}
	trimmed, _ := trimSecret(s)
	return trimmed.(*corev1.Secret), nil
}

// markCurrent sets Ready=True when the Secret holds a current certificate and the request does not say
// so yet (after a conflict was resolved, or when a new leader takes over a request it never wrote).
func (c *Controller) markCurrent(req *certapiv1alpha1.ServingCertRequest, d decision) {
	c.forgetConflict(keyOf(req))
	cond := readyCondition(req)
	if cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == status.ReasonIssued && cond.ObservedGeneration == req.Generation {
		return
	}
	c.status.SetReady(keyOf(req), status.Ready{
		Status: metav1.ConditionTrue,
		Reason: status.ReasonIssued,
		Message: fmt.Sprintf("Secret %q holds certificate %s, valid until %s, renewal at %s",
			req.Spec.SecretName, d.Serial, formatTime(d.NotAfter), formatTime(d.RenewAt)),
		Generation: req.Generation,
	})
}

// reportConflict sets Ready=False with reason SecretConflict and records a Warning Event, once per
// distinct message: the retries that follow do not repeat it.
func (c *Controller) reportConflict(req *certapiv1alpha1.ServingCertRequest, secret *corev1.Secret, msg string) {
	key := keyOf(req)
	c.mu.Lock()
	same := c.reported[key] == msg
	c.reported[key] = msg
	c.mu.Unlock()
	cond := readyCondition(req)
	if same && cond != nil && cond.Reason == status.ReasonSecretConflict && cond.Message == msg && cond.ObservedGeneration == req.Generation {
		return
	}
	c.status.SetReady(key, status.Ready{
		Status:     metav1.ConditionFalse,
		Reason:     status.ReasonSecretConflict,
		Message:    msg,
		Generation: req.Generation,
	})
	if !same {
		c.recorder.Eventf(regarding(req), related(secret), corev1.EventTypeWarning, status.ReasonSecretConflict, "DeliverCertificate", "%s", msg)
	}
}

// clearStaleConflict replaces a SecretConflict condition on a request whose spec.secretName was removed:
// there is no Secret to be in conflict with any more.
func (c *Controller) clearStaleConflict(req *certapiv1alpha1.ServingCertRequest) {
	c.forgetConflict(keyOf(req))
	cond := readyCondition(req)
	if cond == nil || cond.Reason != status.ReasonSecretConflict {
		return
	}
	ready := status.Ready{
		Status:     metav1.ConditionFalse,
		Reason:     status.ReasonPending,
		Message:    "spec.secretName is unset; no certificate has been issued through the servingcerts subresource yet",
		Generation: req.Generation,
	}
	if na := req.Status.NotAfter; req.Status.SerialNumber != "" && na != nil && c.clock.Now().Before(na.Time) {
		ready = status.Ready{
			Status:     metav1.ConditionTrue,
			Reason:     status.ReasonIssued,
			Message:    fmt.Sprintf("spec.secretName is unset; certificate %s was issued, valid until %s", req.Status.SerialNumber, formatTime(na.Time)),
			Generation: req.Generation,
		}
	}
	c.status.SetReady(keyOf(req), ready)
}

// forgetConflict drops the conflict remembered for key.
func (c *Controller) forgetConflict(key types.NamespacedName) {
	c.mu.Lock()
	delete(c.reported, key)
	c.mu.Unlock()
}

func keyOf(req *certapiv1alpha1.ServingCertRequest) types.NamespacedName {
	return types.NamespacedName{Namespace: req.Namespace, Name: req.Name}
}

func readyCondition(req *certapiv1alpha1.ServingCertRequest) *metav1.Condition {
	for i := range req.Status.Conditions {
		if req.Status.Conditions[i].Type == "Ready" {
			return &req.Status.Conditions[i]
		}
	}
	return nil
}

func readyReason(req *certapiv1alpha1.ServingCertRequest) string {
	if cond := readyCondition(req); cond != nil {
		return cond.Reason
	}
	return ""
}

// regarding is the object an Event is about: the request, with its kind set so that any recorder's
// scheme can make a reference to it (informer objects carry no TypeMeta).
func regarding(req *certapiv1alpha1.ServingCertRequest) *certapiv1alpha1.ServingCertRequest {
	return &certapiv1alpha1.ServingCertRequest{
		TypeMeta: metav1.TypeMeta{APIVersion: certapiv1alpha1.SchemeGroupVersion.String(), Kind: "ServingCertRequest"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:       req.Namespace,
			Name:            req.Name,
			UID:             req.UID,
			ResourceVersion: req.ResourceVersion,
		},
	}
}

// related is the Secret an Event also concerns, by reference only: never its data. nil when there is
// no Secret (an untyped nil: a typed nil pointer would make the recorder panic).
func related(s *corev1.Secret) runtime.Object {
	if s == nil {
		return nil
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name, UID: s.UID},
	}
}

func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

// AllIssuedBy reports whether every Secret certapi delivers holds a certificate signed by ca (matched by
// authority key id). The rotation loop uses it to drop a distrusted CA once every Secret is re-issued.
// Before Run has synced its cache it reports false.
func (c *Controller) AllIssuedBy(ca *x509.Certificate) bool {
	if c.secretInformer == nil || !c.secretInformer.HasSynced() {
		return false
	}
	for _, obj := range c.secretInformer.GetStore().List() {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			continue
		}
		block, _ := pem.Decode(s.Data[corev1.TLSCertKey])
		if block == nil {
			continue // an adopted Secret not filled yet holds nothing to distrust
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil || !bytes.Equal(cert.AuthorityKeyId, ca.SubjectKeyId) {
			return false
		}
	}
	return true
}

// trimRequest drops the parts of a ServingCertRequest the controller never reads.
func trimRequest(obj any) (any, error) {
	if r, ok := obj.(*certapiv1alpha1.ServingCertRequest); ok {
		r.ManagedFields = nil
		r.Status.Certificate = ""
		r.Status.CABundle = ""
	}
	return obj, nil
}
