// Package secretdelivery is the leader-only controller that delivers certificates into Secrets for
// ServingCertRequests with spec.secretName: it creates the kubernetes.io/tls Secret when it is missing,
// re-creates it when it is deleted, renews it in place at its renewal time (and when the CA bundle, the
// signing CA or the request's spec changes), and leaves every Secret it does not own untouched,
// reporting the conflict on the request.
//
// It watches only certapi's own Secrets (label certapi.dev/managed=true), never every Secret in the
// cluster, and its cache keeps a small summary of each (see secretView): no private key, and nothing
// that grows with the size of a Secret someone else labelled.
package secretdelivery

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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
	// every namespace that has ServingCertRequests), its certapi informers and its Event recorders.
	// Required. Delivering many Secrets at once needs a client QPS well above client-go's default of 5.
	Context *controller.Context
	// Authority signs, only while it says ok, and tells the controller when the CA or bundle changes.
	// Required.
	Authority issuer.Authority
	// Status writes the requests' status. Required. The caller runs it (Status.Run).
	Status *status.Writer
	// Clock gives "now" for renewal decisions; default the real clock.
	Clock clock.PassiveClock
	// Workers is the number of requests handled concurrently; default DefaultWorkers.
	Workers int
	// OnChange, when set, is called after a labelled Secret changes or a request is deleted: what a
	// pending distrust waits for may have changed (the rotation's Reissued).
	OnChange func()
}

// Controller delivers certificates into Secrets. Make one with New for each leadership term and call
// Run once.
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
	// secretInformer's store holds a *secretView per labelled Secret (its transform is viewSecret).
	secretInformer cache.SharedIndexInformer

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

	ran atomic.Bool
	// onChange is Options.OnChange, or a no-op.
	onChange func()
}

// New checks o and builds a Controller. It registers the ServingCertRequest informer of the term's
// Context (and an index on it) and adds the filtered Secret informer's factory to the term; nothing
// runs until Run.
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
		onChange:   o.OnChange,

		clusterDomain: o.Context.ClusterDomain,
	}
	if c.onChange == nil {
		c.onChange = func() {}
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

	// Only certapi's Secrets, each reduced to its secretView: memory stays small whatever the Secrets
	// hold, and no private key sits in the cache. The store holds secretViews, so there is no lister.
	secretFactory := informers.NewSharedInformerFactoryWithOptions(c.kube, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = certapiv1alpha1.LabelManaged + "=true" }),
		informers.WithTransform(viewSecret))
	c.secretInformer = secretFactory.Core().V1().Secrets().Informer()
	o.Context.AddFactory(secretFactory)

	c.queue = controller.NewQueue(controller.QueueOptions[types.NamespacedName]{
		Name:        "secretdelivery",
		Workers:     workers,
		Sync:        c.sync,
		BackoffBase: errorBackoffBase,
		BackoffMax:  errorBackoffMax,
		// The Secret changed under us; the cache catches up and the retry decides afresh.
		Quiet: func(err error) bool {
			return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err)
		},
	})
	c.conflictBackoff = workqueue.NewTypedItemExponentialFailureRateLimiter[types.NamespacedName](conflictBackoffBase, conflictBackoffMax)
	c.conflicts = newConflictWatches(c.kube, c.enqueueForSecret)
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
// it started and returns nil. The term starts the informers; Run waits for their caches. Run may be
// called once.
func (c *Controller) Run(ctx context.Context) error {
	if !c.ran.CompareAndSwap(false, true) {
		return errors.New("secretdelivery: Run called twice; make a new Controller for each leadership term")
	}
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	reqReg, err := c.requestInformer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onRequestAdd,
		UpdateFunc: c.onRequestUpdate,
		DeleteFunc: c.onRequestDelete,
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return fmt.Errorf("watching ServingCertRequests: %w", err)
	}
	defer func() { _ = c.requestInformer.RemoveEventHandler(reqReg) }()
	secReg, err := c.secretInformer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onSecret,
		UpdateFunc: func(oldObj, newObj any) { c.onSecret(oldObj); c.onSecret(newObj) },
		DeleteFunc: c.onSecret,
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		return fmt.Errorf("watching Secrets: %w", err)
	}
	defer func() { _ = c.secretInformer.RemoveEventHandler(secReg) }()

	if !cache.WaitFor(ctx, "secretdelivery caches", reqReg.HasSyncedChecker(), secReg.HasSyncedChecker()) {
		return nil // ctx ended
	}
	// The initial list enqueued every request; from now on a new CA or bundle re-examines them all.
	c.authorityChanged()
	defer c.authority.AddListener(issuer.ListenerFunc(func() {
		if c.authorityChanged() {
			n := c.enqueueAll()
			logger.Info("CA bundle or signing CA changed; re-examining every delivered Secret", "requests", n)
			return
		}
		c.enqueueNotSigning()
	}))()
	logger.Info("Delivering certificates into Secrets")
	c.queue.Run(ctx)
	logger.Info("Stopped delivering certificates into Secrets")
	return nil
}

// authorityChanged records the Authority's signing CA and bundle and reports whether either differs
// from what was recorded before (the first call only sets the baseline).
func (c *Controller) authorityChanged() bool {
	ca, bundle, ok := c.authority.Signing()
	if !ok || ca == nil || ca.Certificate == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	changed := c.seenCA != nil && (!bytes.Equal(bundle, c.seenBundle) || !bytes.Equal(ca.Certificate.Raw, c.seenCA))
	c.seenCA, c.seenBundle = ca.Certificate.Raw, bundle
	return changed
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
	c.onChange()
}

// onSecret enqueues the request a certapi Secret's annotation names and every request whose
// spec.secretName names it, so that a deleted Secret is re-created within moments and a Secret that
// another request gave up is taken over. A labelled Secret that no existing request names or is named by
// makes no work.
func (c *Controller) onSecret(obj any) {
	var s *secretView
	switch o := obj.(type) {
	case *secretView:
		s = o
	case cache.DeletedFinalStateUnknown:
		if ds, ok := o.Obj.(*secretView); ok {
			s = ds
		} else if ns, name, err := cache.SplitMetaNamespaceKey(o.Key); err == nil {
			c.enqueueForSecret(ns, name)
		}
	}
	c.onChange()
	if s == nil {
		return
	}
	if owner := s.Annotations[certapiv1alpha1.AnnotationServingCertRequest]; owner != "" {
		if _, err := c.requests.ServingCertRequests(s.Namespace).Get(owner); err == nil {
			c.queue.Add(types.NamespacedName{Namespace: s.Namespace, Name: owner})
		}
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

// sync brings one request's Secret up to date.
func (c *Controller) sync(ctx context.Context, key types.NamespacedName) (controller.Result, error) {
	res, conflict, err := c.syncRequest(ctx, key)
	if conflict {
		// Nothing will push a change of this Secret (see maxConflictWatches): look again with a backoff
		// of the request's own, besides at once on any change to the request.
		res.After = c.conflictBackoff.When(key)
	} else if err == nil {
		c.conflictBackoff.Forget(key)
	}
	return res, err
}

// syncRequest brings one request's Secret up to date; conflict says it is in conflict with a Secret
// whose changes nothing pushes, so that it must be looked at again on a timer.
func (c *Controller) syncRequest(ctx context.Context, key types.NamespacedName) (res controller.Result, conflict bool, err error) {
	res, conflict, err = c.syncOnce(ctx, key)
	if errors.Is(err, errExists) {
		// A new request's Secret, taken for absent, exists (a chart shipped it, or another owner has the
		// name): read it and decide again now, rather than after a retry's backoff.
		res, conflict, err = c.syncOnce(ctx, key)
	}
	return res, conflict, err
}

// syncOnce is one look at a request and its Secret.
func (c *Controller) syncOnce(ctx context.Context, key types.NamespacedName) (res controller.Result, conflict bool, err error) {
	req, err := c.requests.ServingCertRequests(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		c.forgetConflict(key) // deleted: its Secret stays, no longer renewed
		return res, false, nil
	}
	if err != nil {
		return res, false, fmt.Errorf("getting ServingCertRequest %s from the cache: %w", key, err)
	}
	if req.DeletionTimestamp != nil {
		return res, false, nil
	}
	if req.Spec.SecretName == "" {
		c.clearStaleConflict(req)
		return res, false, nil
	}
	ca, bundle, ok := c.authority.Signing()
	if !ok || ca == nil {
		c.waitForSigning(key)
		return res, false, nil
	}
	secret, err := c.getSecret(ctx, req)
	if err != nil {
		return res, false, err
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
		return controller.Result{After: d.RenewAt.Sub(now)}, false, nil
	case actionRecordUID:
		if err := c.recordUID(ctx, req, secret); err != nil {
			return res, false, err
		}
		c.markCurrent(req, d)
		return controller.Result{After: d.RenewAt.Sub(now)}, false, nil
	case actionConflict:
		c.reportConflict(req, secret, d.Conflict)
		// A certapi Secret is in the cache, whose events wake the request; any other is watched.
		if c.cachedSecret(secret.Namespace, secret.Name) != nil || c.conflicts.watch(ctx, key, secret) {
			return res, false, nil
		}
		return res, true, nil
	case actionCreate, actionIssue:
		renewAt, err := c.deliver(ctx, req, secret, now, d)
		if err != nil {
			return res, false, err
		}
		return controller.Result{After: renewAt.Sub(now)}, false, nil
	}
	return res, false, nil
}

// getSecret returns the secretView of the Secret req names, or nil when it does not exist. A certapi
// Secret comes from the cache; any other is read directly, since the cache holds only certapi's, except
// for a new request (see mayAssumeAbsent), whose Secret is taken for absent without a read.
func (c *Controller) getSecret(ctx context.Context, req *certapiv1alpha1.ServingCertRequest) (*secretView, error) {
	namespace, name := req.Namespace, req.Spec.SecretName
	if v := c.cachedSecret(namespace, name); v != nil {
		return v, nil
	}
	if c.mayAssumeAbsent(req) {
		return nil, nil
	}
	s, err := c.kube.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting Secret %s/%s: %w", namespace, name, err)
	}
	return viewOf(s), nil
}

// mayAssumeAbsent reports whether the Secret of req, not in the cache, may be taken for absent without
// reading it: req has never been issued a certificate nor given a Ready condition (it was just
// created), and no create for it has found a Secret of that name yet. Then the create that follows
// costs no read of kube-apiserver, and a Secret that does exist (a Helm chart's, another owner's) makes
// it fail with AlreadyExists, after which the request's Secret is read before every write. All that
// costs is the certificate signed for that create, which nobody ever sees.
func (c *Controller) mayAssumeAbsent(req *certapiv1alpha1.ServingCertRequest) bool {
	if req.Status.SerialNumber != "" || len(req.Status.Conditions) > 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, read := c.readFirst[keyOf(req)]
	_, reported := c.reported[keyOf(req)]
	return !read && !reported
}

// mustReadFirst records that the Secret of key exists although its request took it for absent, and
// reports whether that is news.
func (c *Controller) mustReadFirst(key types.NamespacedName) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.readFirst[key]; ok {
		return false
	}
	c.readFirst[key] = struct{}{}
	return true
}

// cachedSecret returns the cache's view of namespace/name, nil when it holds none.
func (c *Controller) cachedSecret(namespace, name string) *secretView {
	obj, ok, err := c.secretInformer.GetIndexer().GetByKey(namespace + "/" + name)
	if err != nil || !ok {
		return nil
	}
	v, _ := obj.(*secretView)
	return v
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
func (c *Controller) reportConflict(req *certapiv1alpha1.ServingCertRequest, secret *secretView, msg string) {
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

// forgetConflict drops the conflict remembered for key, that its Secret must be read first, and the
// watch of that Secret.
func (c *Controller) forgetConflict(key types.NamespacedName) {
	c.mu.Lock()
	delete(c.reported, key)
	delete(c.readFirst, key)
	c.mu.Unlock()
	c.conflicts.release(key)
}

// waitForSigning remembers that key was looked at while the Authority could not sign. The Authority
// tells its listeners when signing resumes (leadership, a loaded CA, a renewed lease); should that have
// happened between the caller's look and now, the requests are enqueued at once.
func (c *Controller) waitForSigning(key types.NamespacedName) {
	c.mu.Lock()
	c.notSigning[key] = struct{}{}
	c.mu.Unlock()
	if ca, _, ok := c.authority.Signing(); ok && ca != nil {
		c.enqueueNotSigning()
	}
}

// enqueueNotSigning enqueues the requests that waited for the Authority to sign, if it signs now.
func (c *Controller) enqueueNotSigning() {
	if ca, _, ok := c.authority.Signing(); !ok || ca == nil {
		return
	}
	c.mu.Lock()
	keys := c.notSigning
	c.notSigning = map[types.NamespacedName]struct{}{}
	c.mu.Unlock()
	for k := range keys {
		c.queue.Add(k)
	}
}

func keyOf(req *certapiv1alpha1.ServingCertRequest) types.NamespacedName {
	return types.NamespacedName{Namespace: req.Namespace, Name: req.Name}
}

func readyCondition(req *certapiv1alpha1.ServingCertRequest) *metav1.Condition {
	return meta.FindStatusCondition(req.Status.Conditions, certapiv1alpha1.ConditionReady)
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
func related(s *secretView) runtime.Object {
	if s == nil {
		return nil
	}
	return secretRef(&s.ObjectMeta)
}

// secretRef is a reference to the Secret m describes, for an Event.
func secretRef(m *metav1.ObjectMeta) runtime.Object {
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name, UID: m.UID},
	}
}

func formatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

// Distrust tallies the labelled Secrets for a pending distrust against the Active CA active (see
// tallyDistrust): what the distrust waits for and what it does not. ok is false until the caches have
// synced. It parses nothing (the cache holds each certificate's summary) and is called only while a
// distrust is pending.
func (c *Controller) Distrust(active *x509.Certificate) (tally DistrustTally, ok bool) {
	if c.secretInformer == nil || !c.secretInformer.HasSynced() || !c.requestInformer.HasSynced() {
		return tally, false
	}
	objs := c.secretInformer.GetStore().List()
	secrets := make([]*secretView, 0, len(objs))
	for _, obj := range objs {
		if s, ok := obj.(*secretView); ok {
			secrets = append(secrets, s)
		}
	}
	return tallyDistrust(secrets, func(namespace, name string) *certapiv1alpha1.ServingCertRequest {
		req, err := c.requests.ServingCertRequests(namespace).Get(name)
		if err != nil {
			return nil
		}
		return req
	}, active.SubjectKeyId), true
}
