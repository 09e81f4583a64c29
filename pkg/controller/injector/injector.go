// Package injector is the leader-only loop that injects certapi's CA bundle into the objects that opt in
// with the annotation certapi.dev/inject-ca-bundle: "true": ValidatingWebhookConfigurations and
// MutatingWebhookConfigurations (every webhooks[] entry whose clientConfig names a service),
// CustomResourceDefinitions (spec.conversion.webhook.clientConfig.caBundle, with strategy Webhook and a
// service) and APIServices (spec.caBundle, unless local or insecureSkipTLSVerify).
//
// How it writes (DESIGN.md, "Opting in to caBundle injection"):
//   - Only the caBundle fields, under field manager "certapi", with an RFC 6902 JSON patch whose first
//     operation tests metadata.resourceVersion: an update-style write (never server-side apply), so Argo
//     CD's ignoreDifferences with managedFieldsManagers: [certapi] matches it, and a webhooks[] entry
//     addressed by its index is the one that was read. An owner who applies the object server-side can
//     still remove a webhook entry: certapi owns only the caBundle inside it, not the entry.
//   - A CRD whose spec.conversion is managed by server-side apply would still be stuck: certapi's
//     ownership of the caBundle keeps spec.conversion.webhook alive when the owner switches the
//     strategy to None, and validation refuses that (kubernetes#108081, the CRD form of #128102). For
//     such CRDs certapi removes its own managedFields entry after writing, leaving the caBundle owned by
//     no one: an apply without it keeps it, and an apply that drops the webhook drops it too. GitOps
//     stays quiet there because a server-side apply diff keeps fields the applier does not own.
//   - The bundle is written only when it differs, byte for byte, from what the object holds: every
//     caBundle change on a CRD restarts that CRD's storage. The bundle is canonicalised (parsed and
//     re-encoded with signer.EncodeBundle) so the same certificates always give the same bytes.
//   - Drift (another writer changes a caBundle certapi wrote) is restored at once, but an object whose
//     caBundle is overwritten again and again is reported as a conflict and left alone for a cool-down
//     (or until any of its annotations changes), rather than fought over.
//   - An object that another injector also claims (cert-manager.io/inject-ca-*,
//     cert-manager.io/inject-apiserver-ca, service.beta.openshift.io/inject-cabundle) is never touched:
//     it is counted as a conflict and a Warning Event on it says why and what to do. (Events about
//     these cluster-scoped objects are recorded in namespace default, as events.k8s.io does.)
//   - Removing the annotation stops management and leaves the caBundle as it is.
//
// It watches the four kinds with metadata-only informers, whose cache keeps only names, UIDs,
// resourceVersions and the annotations that matter, and reads in full only the objects that opt in,
// once per change; an object it patched is not read again (the patch response is the new state).
package injector

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

const (
	// AnnotationInject opts an object in when its value is "true".
	AnnotationInject = "certapi.dev/inject-ca-bundle"
	// FieldManager is the field manager of every write.
	FieldManager = "certapi"
	// ReportingController is the reportingController of the Events the injector records when it makes
	// its own recorder.
	ReportingController = "certapi.dev/injector"

	// annotationsHashKey holds, in the informer cache only, a fingerprint of all of an object's
	// annotations (see annotationsHash). It is never written to any object.
	annotationsHashKey = "injector.certapi.dev/annotations-hash"
)

// Reasons, in Problems and in Events.
const (
	// ReasonClaimedByAnotherInjector: the object also carries another injector's annotation.
	ReasonClaimedByAnotherInjector = "ClaimedByAnotherInjector"
	// ReasonCABundleOverwritten: another writer keeps overwriting the caBundle.
	ReasonCABundleOverwritten = "CABundleOverwritten"
	// ReasonNothingToInject: the object opts in but has no caBundle to keep (url webhooks only, a CRD
	// without webhook conversion, a local or insecure APIService).
	ReasonNothingToInject = "NothingToInject"
	// ReasonInjectionFailed: reading or writing the object failed; it is retried with backoff.
	ReasonInjectionFailed = "InjectionFailed"
	// ReasonWaitingForBundle: the BundleSource has no bundle yet.
	ReasonWaitingForBundle = "WaitingForBundle"
	// ReasonInvalidBundle: the BundleSource's bundle does not parse; nothing is written.
	ReasonInvalidBundle = "InvalidBundle"
)

// Defaults and timing. The fight and cool-down figures are part of the behaviour DESIGN.md promises.
const (
	// DefaultResync is how often every target is looked at again when Options.Resync is zero.
	DefaultResync = 10 * time.Minute
	// DefaultWorkers is the number of objects handled concurrently when Options.Workers is zero.
	DefaultWorkers = 8
	// DefaultQPS and DefaultBurst are the client rate limit when Options.Config sets none (client-go's
	// own default of 5 QPS would take minutes to re-inject a thousand objects after a rotation).
	DefaultQPS   = 200
	DefaultBurst = 400

	// An object is in conflict when restoring its caBundle would make more than fightLimit restorations
	// within fightWindow; it is then left alone for conflictCooldown, or until an annotation changes.
	fightLimit       = 3
	fightWindow      = time.Minute
	conflictCooldown = 5 * time.Minute
	// bundlePollInterval: how often the BundleSource is asked whether the bundle changed, in case a
	// Trigger was missed.
	bundlePollInterval = time.Second
	// Failed reads and writes back off per object from errorBackoffBase to errorBackoffMax. A write
	// refused because the object changed under it is retried after errorBackoffBase.
	errorBackoffBase = 50 * time.Millisecond
	errorBackoffMax  = 5 * time.Minute
)

// BundleSource gives the trust bundle to inject.
type BundleSource interface {
	// Bundle returns the current PEM bundle; ok=false means there is none yet: do nothing.
	Bundle() (pem []byte, ok bool)
}

// Options configures New.
type Options struct {
	// Config reaches kube-apiserver. Needed: get, list, watch and patch on
	// validatingwebhookconfigurations and mutatingwebhookconfigurations (admissionregistration.k8s.io),
	// customresourcedefinitions (apiextensions.k8s.io) and apiservices (apiregistration.k8s.io); and,
	// when Recorder is nil, create and patch on events (events.k8s.io). When it sets no rate limit
	// (QPS 0 and no RateLimiter), DefaultQPS and DefaultBurst apply; whatever limit applies is shared
	// by all the injector's clients. Required.
	Config *rest.Config
	// Source gives the bundle. Required.
	Source BundleSource
	// Recorder records the Warning Events on objects refused or fought over. When nil, Run makes an
	// events.k8s.io recorder with ReportingController and stops it when it returns.
	Recorder events.EventRecorder
	// Resync is how often every target is looked at again; DefaultResync when zero.
	Resync time.Duration
	// Clock is used for the fight window and the conflict cool-down; the real clock when nil.
	Clock clock.Clock
	// Workers is the number of objects handled concurrently; DefaultWorkers when zero.
	Workers int
}

// State is where one target stands.
type State string

// States.
const (
	// StatePending: not yet up to date (being written, waiting for a bundle, or failing).
	StatePending State = "Pending"
	// StateUpToDate: every caBundle of the object holds the current bundle.
	StateUpToDate State = "UpToDate"
	// StateSkipped: the object opts in but has nothing to inject.
	StateSkipped State = "Skipped"
	// StateConflict: certapi refuses to manage the object (another injector claims it, or another
	// writer keeps overwriting it).
	StateConflict State = "Conflict"
)

// Problem is one target that is not simply up to date, and why.
type Problem struct {
	Kind    Kind
	Name    string
	State   State
	Reason  string
	Message string
}

// Summary counts the targets (the objects that opt in) by state. Targets = UpToDate + Skipped +
// Conflicts + Pending.
type Summary struct {
	Targets   int
	UpToDate  int
	Skipped   int
	Conflicts int
	Pending   int
	// Problems lists every target that is skipped, in conflict, or pending for a known reason, sorted
	// by kind (in Kinds order) and name.
	Problems []Problem
}

// InjectionSummary is s as CertificateAuthority status.injection.
func (s Summary) InjectionSummary() *certapiv1alpha1.InjectionSummary {
	return &certapiv1alpha1.InjectionSummary{
		Targets:   int32(s.Targets),
		UpToDate:  int32(s.UpToDate),
		Skipped:   int32(s.Skipped),
		Conflicts: int32(s.Conflicts),
	}
}

// key names one object; every kind is cluster-scoped.
type key struct {
	kind Kind
	name string
}

// objState is what the injector keeps per target.
type objState struct {
	state   State
	reason  string
	message string
	// obs is the last full observation.
	obs *observation
	// held maps each slot name to the digest of the bundle certapi last saw the slot hold, or wrote.
	held map[string]digest
	// bundle is the digest of the bundle the object was up to date with (StateUpToDate): after the
	// Source's bundle changes, Summary counts the object as pending until it has been re-checked.
	bundle digest
	// restorations are the times certapi restored an overwritten caBundle, within fightWindow.
	restorations []time.Time
	// foughtUntil ends the cool-down of a fought-over object; foughtAnnotations is its annotations'
	// fingerprint then (a change ends the cool-down early).
	foughtUntil       time.Time
	foughtAnnotations string
	// warned is the message of the last Warning Event, so that retries do not repeat it.
	warned string
}

// Injector injects the CA bundle. Make one with New for each leadership term and call Run once.
type Injector struct {
	source   BundleSource
	recorder events.EventRecorder
	kube     kubernetes.Interface
	clock    clock.Clock
	workers  int

	kinds     map[Kind]*kindClient
	factory   metadatainformer.SharedInformerFactory
	informers map[Kind]cache.SharedIndexInformer
	queue     workqueue.TypedRateLimitingInterface[key]

	// Timing; tests shorten them.
	fightLimit         int
	fightWindow        time.Duration
	conflictCooldown   time.Duration
	bundlePollInterval time.Duration

	mu      sync.Mutex
	objects map[key]*objState
	synced  bool

	bundleMu    sync.Mutex
	bundleCache map[digest]canonicalBundle

	ran atomic.Bool
}

// canonicalBundle is a bundle as the injector writes it.
type canonicalBundle struct {
	pem    []byte
	digest digest
	err    error
}

// New checks o, builds the clients and the metadata informers. Nothing runs until Run.
func New(o Options) (*Injector, error) {
	switch {
	case o.Config == nil:
		return nil, errors.New("injector: Options.Config is required")
	case o.Source == nil:
		return nil, errors.New("injector: Options.Source is required")
	case o.Resync < 0:
		return nil, fmt.Errorf("injector: Options.Resync is %s; expected 0 (default %s) or more", o.Resync, DefaultResync)
	case o.Workers < 0:
		return nil, fmt.Errorf("injector: Options.Workers is %d; expected 0 (default %d) or more", o.Workers, DefaultWorkers)
	}
	cfg := rest.CopyConfig(o.Config)
	if cfg.RateLimiter == nil && cfg.QPS >= 0 { // a negative QPS turns client-side limiting off
		qps, burst := cfg.QPS, cfg.Burst
		if qps == 0 {
			qps, burst = DefaultQPS, DefaultBurst
		}
		if burst < 1 {
			burst = 1
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(qps, burst) // one budget for every client below
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent() + " " + ReportingController
	}
	// Full objects in protobuf: CRDs are large, and decoding JSON is most of the cost of reading one.
	protoCfg := rest.CopyConfig(cfg)
	protoCfg.ContentType = "application/vnd.kubernetes.protobuf"
	protoCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	kube, err := kubernetes.NewForConfig(protoCfg)
	if err != nil {
		return nil, fmt.Errorf("injector: kubernetes client: %w", err)
	}
	ext, err := apiextensionsclient.NewForConfig(protoCfg)
	if err != nil {
		return nil, fmt.Errorf("injector: apiextensions client: %w", err)
	}
	agg, err := aggregatorclient.NewForConfig(protoCfg)
	if err != nil {
		return nil, fmt.Errorf("injector: aggregator client: %w", err)
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("injector: metadata client: %w", err)
	}

	i := &Injector{
		source:             o.Source,
		recorder:           o.Recorder,
		kube:               kube,
		clock:              o.Clock,
		workers:            o.Workers,
		kinds:              newKindClients(kube, ext, agg),
		informers:          map[Kind]cache.SharedIndexInformer{},
		fightLimit:         fightLimit,
		fightWindow:        fightWindow,
		conflictCooldown:   conflictCooldown,
		bundlePollInterval: bundlePollInterval,
		objects:            map[key]*objState{},
		bundleCache:        map[digest]canonicalBundle{},
	}
	if i.clock == nil {
		i.clock = clock.RealClock{}
	}
	if i.workers == 0 {
		i.workers = DefaultWorkers
	}
	resync := o.Resync
	if resync == 0 {
		resync = DefaultResync
	}
	i.factory = metadatainformer.NewSharedInformerFactoryWithOptions(meta, resync, metadatainformer.WithTransform(trimMetadata))
	for _, kind := range Kinds {
		i.informers[kind] = i.factory.ForResource(i.kinds[kind].gvr).Informer()
	}
	queueCfg := workqueue.TypedRateLimitingQueueConfig[key]{Name: "injector"}
	if c, ok := i.clock.(clock.WithTicker); ok {
		queueCfg.Clock = c
	}
	i.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[key](errorBackoffBase, errorBackoffMax), queueCfg)
	return i, nil
}

// trimMetadata is the informers' transform: it keeps the name, UID, resourceVersion, deletion
// timestamp and the annotations that matter, plus a fingerprint of all annotations.
func trimMetadata(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{
		TypeMeta: m.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name:              m.Name,
			UID:               m.UID,
			ResourceVersion:   m.ResourceVersion,
			DeletionTimestamp: m.DeletionTimestamp,
		},
	}
	for k, v := range m.Annotations {
		if relevantAnnotation(k) {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	if out.Annotations[AnnotationInject] == "true" {
		out.Annotations[annotationsHashKey] = annotationsHash(m.Annotations)
	}
	return out, nil
}

func optedIn(m *metav1.PartialObjectMetadata) bool {
	return m.Annotations[AnnotationInject] == "true" && m.DeletionTimestamp == nil
}

// Run injects until ctx ends (when this replica stops leading), then stops every goroutine it started
// and returns nil. It starts and stops its own informers. Run may be called once.
func (i *Injector) Run(ctx context.Context) error {
	if !i.ran.CompareAndSwap(false, true) {
		return errors.New("injector: Run called twice; make a new Injector for each leadership term")
	}
	logger := klog.FromContext(ctx).WithName("injector")
	ctx = klog.NewContext(ctx, logger)

	defer i.factory.Shutdown()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer i.queue.ShutDown()

	if i.recorder == nil {
		broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: i.kube.EventsV1()})
		i.recorder = broadcaster.NewRecorder(kubescheme.Scheme, ReportingController)
		if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
			return fmt.Errorf("injector: starting the event recorder: %w", err)
		}
		defer broadcaster.Shutdown()
	}

	var synced []cache.InformerSynced
	for _, kind := range Kinds {
		inf := i.informers[kind]
		reg, err := inf.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { i.onObject(kind, obj) },
			UpdateFunc: func(_, obj any) { i.onObject(kind, obj) },
			DeleteFunc: func(obj any) { i.onDelete(kind, obj) },
		}, cache.HandlerOptions{Logger: &logger})
		if err != nil {
			return fmt.Errorf("injector: watching %ss: %w", kind, err)
		}
		defer func() { _ = inf.RemoveEventHandler(reg) }()
		synced = append(synced, reg.HasSynced)
	}
	i.factory.Start(ctx.Done())
	slow := time.AfterFunc(30*time.Second, func() {
		logger.Info("Still waiting for the informer caches; can certapi list and watch webhook configurations, CRDs and APIServices?")
	})
	ok := cache.WaitForCacheSync(ctx.Done(), synced...)
	slow.Stop()
	if !ok {
		return nil // ctx ended
	}
	i.mu.Lock()
	i.synced = true
	targets := len(i.objects)
	i.mu.Unlock()
	logger.Info("Injecting the CA bundle", "targets", targets, "workers", i.workers)

	var wg sync.WaitGroup
	for range i.workers {
		wg.Go(func() {
			for i.processNext(ctx) {
			}
		})
	}
	wg.Go(func() { i.watchSource(ctx) })
	<-ctx.Done()
	i.queue.ShutDown()
	wg.Wait()
	logger.Info("Stopped injecting the CA bundle")
	return nil
}

// Trigger re-checks every target now: call it when the bundle changed. Run also notices a change of
// the Source's bundle within about a second on its own.
func (i *Injector) Trigger() {
	i.mu.Lock()
	keys := make([]key, 0, len(i.objects))
	for k := range i.objects {
		keys = append(keys, k)
	}
	i.mu.Unlock()
	for _, k := range keys {
		i.queue.Add(k)
	}
}

// watchSource asks the Source every bundlePollInterval and triggers when its bundle changed (or
// appeared), in case the caller did not.
func (i *Injector) watchSource(ctx context.Context) {
	var last digest
	var have, seen bool
	timer := i.clock.NewTimer(i.bundlePollInterval)
	defer timer.Stop()
	for {
		pem, d, err := i.currentBundle()
		now := pem != nil && err == nil
		if err != nil && (!seen || have) {
			klog.FromContext(ctx).Error(err, "The CA bundle to inject does not parse; nothing is written until it does")
		}
		if seen && (now != have || d != last) {
			klog.FromContext(ctx).V(2).Info("The CA bundle changed; re-checking every target")
			i.Trigger()
		}
		last, have, seen = d, now, true
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			timer.Reset(i.bundlePollInterval)
		}
	}
}

// currentBundle returns the Source's bundle, canonical, with its digest; nil when there is none.
func (i *Injector) currentBundle() ([]byte, digest, error) {
	raw, ok := i.source.Bundle()
	if !ok || len(raw) == 0 {
		return nil, digest{}, nil
	}
	c := i.canonical(raw)
	return c.pem, c.digest, c.err
}

// canonical parses a PEM bundle and re-encodes it with signer.EncodeBundle (deduplicated, in order).
// A bundle that does not parse is an error: writing it would break every target at once.
func (i *Injector) canonical(raw []byte) canonicalBundle {
	in := digestOf(raw)
	i.bundleMu.Lock()
	defer i.bundleMu.Unlock()
	if c, ok := i.bundleCache[in]; ok {
		return c
	}
	var c canonicalBundle
	certs, err := signer.ParseBundle(raw)
	if err != nil {
		c.err = err
	} else {
		c.pem = signer.EncodeBundle(certs...)
		c.digest = digestOf(c.pem)
	}
	if len(i.bundleCache) >= 8 {
		clear(i.bundleCache)
	}
	i.bundleCache[in] = c
	return c
}

// onObject enqueues an object that opts in, or that did (so that giving up is noticed).
func (i *Injector) onObject(kind Kind, obj any) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return
	}
	k := key{kind, m.Name}
	i.mu.Lock()
	_, tracked := i.objects[k]
	if optedIn(m) && !tracked {
		i.objects[k] = &objState{state: StatePending}
		tracked = true
	}
	i.mu.Unlock()
	if tracked {
		i.queue.Add(k)
	}
}

func (i *Injector) onDelete(kind Kind, obj any) {
	name, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	i.forget(key{kind, name})
}

func (i *Injector) forget(k key) {
	i.mu.Lock()
	delete(i.objects, k)
	i.mu.Unlock()
}

// processNext handles one queued object; false means the queue is shut down.
func (i *Injector) processNext(ctx context.Context) bool {
	k, quit := i.queue.Get()
	if quit {
		return false
	}
	defer i.queue.Done(k)
	after, err := i.sync(ctx, k)
	switch {
	case err != nil:
		logger := klog.FromContext(ctx)
		if apierrors.IsConflict(err) || apierrors.IsInvalid(err) {
			// Most likely the resourceVersion test failed: the object changed since it was read. It is
			// read again; a write that is really invalid keeps failing, backs off and is reported.
			logger.V(2).Info("Object changed while injecting; retrying", "kind", k.kind, "name", k.name, "err", err)
		} else {
			logger.Error(err, "Injecting the CA bundle", "kind", k.kind, "name", k.name)
		}
		i.queue.AddRateLimited(k)
	default:
		i.queue.Forget(k)
		if after > 0 {
			i.queue.AddAfter(k, after)
		}
	}
	return true
}

// sync brings one object up to date. A positive duration re-queues it after that long.
func (i *Injector) sync(ctx context.Context, k key) (time.Duration, error) {
	m := i.meta(k)
	if m == nil || !optedIn(m) {
		i.forget(k) // deleted, or the annotation was removed: the caBundle stays as it is
		return 0, nil
	}
	i.mu.Lock()
	if _, ok := i.objects[k]; !ok {
		i.objects[k] = &objState{state: StatePending}
	}
	i.mu.Unlock()

	if claims := foreignClaims(m.Annotations); len(claims) > 0 {
		i.setConflict(k, m, ReasonClaimedByAnotherInjector, refusal(k.kind, k.name, claims))
		return 0, nil
	}
	now := i.clock.Now()
	if wait := i.coolingDown(k, m, now); wait > 0 {
		return wait, nil
	}
	bundle, d, err := i.currentBundle()
	switch {
	case err != nil:
		i.setPending(k, ReasonInvalidBundle, "the CA bundle to inject does not parse, so nothing is written: "+err.Error())
		return 0, nil // the next bundle change triggers again
	case bundle == nil:
		i.setPending(k, ReasonWaitingForBundle, "there is no CA bundle to inject yet")
		return 0, nil
	}

	kc := i.kinds[k.kind]
	logger := klog.FromContext(ctx).WithValues("kind", k.kind, "name", k.name)
	// At most: one write of the bundle, one release of the managedFields entry, and the reads
	// between; more means the object keeps changing, and the informer will bring it back.
	for range 4 {
		obs, held := i.observed(k)
		if !obs.current(m.UID, m.ResourceVersion) {
			obs, err = kc.get(ctx, k.name)
			if apierrors.IsNotFound(err) {
				i.forget(k)
				return 0, nil
			}
			if err != nil {
				i.setFailed(k, nil, fmt.Sprintf("reading %s %s: %v", k.kind, k.name, err))
				return 0, err
			}
			i.setObservation(k, obs)
		}
		p := decide(obs, bundle, d, held)
		switch {
		case p.skip != "":
			i.setSkipped(k, obs, p.skip)
			return 0, nil

		case p.upToDate && p.release == nil:
			i.setUpToDate(k, obs, d)
			return 0, nil

		case p.upToDate:
			resp, err := kc.patch(ctx, k.name, p.release)
			if err != nil {
				i.setFailed(k, obs, i.failure(k, err, fmt.Sprintf("removing certapi's managedFields entry from %s %s: %v", k.kind, k.name, err)))
				return 0, err
			}
			resp.basedOn = m.ResourceVersion
			i.setObservation(k, resp)
			logger.V(2).Info("Gave up certapi's field ownership of the caBundle, so that the server-side apply owner of spec.conversion can change it", "appliers", obs.appliedBy)

		default:
			if len(p.overwritten) > 0 {
				if fought := i.restoration(k, m, obs, p, now); fought {
					return i.conflictCooldown, nil
				}
			}
			resp, err := kc.patch(ctx, k.name, p.patch)
			if err != nil {
				i.setFailed(k, obs, i.failure(k, err, fmt.Sprintf("writing the caBundle of %s %s: %v", k.kind, k.name, err)))
				return 0, err
			}
			resp.basedOn = m.ResourceVersion
			i.setWritten(k, resp, d)
			logger.V(2).Info("Injected the CA bundle", "slots", p.write, "restored", len(p.overwritten) > 0)
		}
	}
	return 0, nil
}

// meta returns the informer's copy of k, or nil.
func (i *Injector) meta(k key) *metav1.PartialObjectMetadata {
	obj, exists, err := i.informers[k.kind].GetStore().GetByKey(k.name)
	if err != nil || !exists {
		return nil
	}
	m, _ := obj.(*metav1.PartialObjectMetadata)
	return m
}

// observed returns k's last observation and a copy of its held digests.
func (i *Injector) observed(k key) (*observation, map[string]digest) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.objects[k]
	if st == nil {
		return nil, nil
	}
	held := make(map[string]digest, len(st.held))
	for n, d := range st.held {
		held[n] = d
	}
	return st.obs, held
}

// state returns k's state, made if missing; i.mu must be held.
func (i *Injector) state(k key) *objState {
	st := i.objects[k]
	if st == nil {
		st = &objState{state: StatePending}
		i.objects[k] = st
	}
	return st
}

func (i *Injector) setObservation(k key, obs *observation) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.state(k).obs = obs
}

func (i *Injector) setPending(k key, reason, msg string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.state, st.reason, st.message, st.warned = StatePending, reason, msg, ""
}

// staleRetries is how many times in a row a write may be refused as stale (its resourceVersion test
// failed, or a conflict) before it is reported as a problem: the object was just changing, which is
// normal for a CRD that kube-apiserver is still establishing.
const staleRetries = 3

// failure returns the problem message for a failed write, or "" while a stale write is retried.
func (i *Injector) failure(k key, err error, msg string) string {
	if (apierrors.IsInvalid(err) || apierrors.IsConflict(err)) && i.queue.NumRequeues(k) < staleRetries {
		return ""
	}
	return msg
}

// setFailed records a failed read or write (msg "" records nothing but that the object must be read
// again); obs, when not nil, is forgotten so the next try reads.
func (i *Injector) setFailed(k key, obs *observation, msg string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	if obs != nil && st.obs == obs {
		st.obs = nil
	}
	if msg != "" && st.state != StateConflict {
		st.state, st.reason, st.message = StatePending, ReasonInjectionFailed, msg
	}
}

func (i *Injector) setSkipped(k key, obs *observation, why string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.obs = obs
	st.state, st.reason, st.message, st.warned = StateSkipped, ReasonNothingToInject, fmt.Sprintf("nothing to inject into %s %s: %s", k.kind, k.name, why), ""
}

func (i *Injector) setUpToDate(k key, obs *observation, d digest) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.obs = obs
	st.state, st.reason, st.message, st.warned = StateUpToDate, "", "", ""
	st.held = heldBy(obs, d)
	st.bundle = d
}

// setWritten records a successful write of the bundle with digest d; obs is the patch response.
func (i *Injector) setWritten(k key, obs *observation, d digest) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.obs = obs
	st.held = heldBy(obs, d)
	if obs.holds(d) {
		st.state, st.reason, st.message, st.warned = StateUpToDate, "", "", ""
		st.bundle = d
	}
}

// heldBy maps the slots of obs that hold d to d.
func heldBy(obs *observation, d digest) map[string]digest {
	held := make(map[string]digest, len(obs.Slots))
	for _, s := range obs.Slots {
		if s.Digest == d {
			held[s.Name] = d
		}
	}
	return held
}

// setConflict marks k as in conflict and records a Warning Event, once per distinct message.
func (i *Injector) setConflict(k key, m *metav1.PartialObjectMetadata, reason, msg string) {
	i.mu.Lock()
	st := i.state(k)
	st.state, st.reason, st.message = StateConflict, reason, msg
	warn := st.warned != msg
	st.warned = msg
	i.mu.Unlock()
	if warn {
		i.recorder.Eventf(i.regarding(k, m), nil, corev1.EventTypeWarning, reason, "InjectCABundle", "%s", msg)
	}
}

// restoration counts one more restoration of an overwritten caBundle. When that would make more than
// fightLimit within fightWindow, the object goes into conflict for conflictCooldown instead, and
// restoration returns true: do not write.
func (i *Injector) restoration(k key, m *metav1.PartialObjectMetadata, obs *observation, p plan, now time.Time) bool {
	i.mu.Lock()
	st := i.state(k)
	kept := st.restorations[:0]
	for _, t := range st.restorations {
		if now.Sub(t) < i.fightWindow {
			kept = append(kept, t)
		}
	}
	st.restorations = kept
	if len(kept) < i.fightLimit {
		st.restorations = append(st.restorations, now)
		i.mu.Unlock()
		return false
	}
	st.restorations = nil
	st.foughtUntil = now.Add(i.conflictCooldown)
	st.foughtAnnotations = m.Annotations[annotationsHashKey]
	i.mu.Unlock()

	by := "another writer"
	if writers := overwrittenBy(obs, p.overwritten); len(writers) > 0 {
		by = fmt.Sprintf("field manager %q", writers[0])
		for _, w := range writers[1:] {
			by += fmt.Sprintf(", %q", w)
		}
	}
	msg := fmt.Sprintf("the caBundle of %s (%s) was overwritten %d times within %s, last by %s; certapi restored it %d times and now leaves it alone for %s "+
		"(or until an annotation of the object changes). Stop the other writer (for Argo CD: ignoreDifferences with managedFieldsManagers: [%s] and the RespectIgnoreDifferences=true sync option), "+
		"or remove annotation %s to let it own the caBundle.",
		k.name, joinLabels(p.overwritten), i.fightLimit+1, i.fightWindow, by, i.fightLimit, i.conflictCooldown, FieldManager, AnnotationInject)
	i.setConflict(k, m, ReasonCABundleOverwritten, msg)
	return true
}

func joinLabels(labels []string) string {
	out := ""
	for n, l := range labels {
		if n > 0 {
			out += ", "
		}
		out += l
	}
	return out
}

// coolingDown returns how long k, fought over, is still left alone; 0 when it is not (and then any
// cool-down that ended, or that an annotation change cut short, is cleared).
func (i *Injector) coolingDown(k key, m *metav1.PartialObjectMetadata, now time.Time) time.Duration {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	if st.foughtUntil.IsZero() {
		return 0
	}
	if wait := st.foughtUntil.Sub(now); wait > 0 && m.Annotations[annotationsHashKey] == st.foughtAnnotations {
		return wait
	}
	st.foughtUntil, st.foughtAnnotations = time.Time{}, ""
	st.state, st.reason, st.message, st.warned = StatePending, "", "", ""
	st.obs = nil // read afresh
	return 0
}

// regarding is the object an Event is about, by reference only.
func (i *Injector) regarding(k key, m *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: i.kinds[k.kind].apiVersion, Kind: string(k.kind)},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion},
	}
}

// Summary counts the targets by state and lists the problems. It is computed on each call from the
// injector's current view; an object up to date with an earlier bundle counts as pending.
func (i *Injector) Summary() Summary {
	_, current, _ := i.currentBundle()
	i.mu.Lock()
	defer i.mu.Unlock()
	var s Summary
	for k, st := range i.objects {
		s.Targets++
		switch st.state {
		case StateUpToDate:
			if st.bundle != current {
				s.Pending++ // up to date with a bundle that is no longer the Source's: not re-checked yet
				continue
			}
			s.UpToDate++
		case StateSkipped:
			s.Skipped++
		case StateConflict:
			s.Conflicts++
		default:
			s.Pending++
		}
		if st.state != StateUpToDate && st.reason != "" {
			s.Problems = append(s.Problems, Problem{Kind: k.kind, Name: k.name, State: st.state, Reason: st.reason, Message: st.message})
		}
	}
	order := map[Kind]int{}
	for n, kind := range Kinds {
		order[kind] = n
	}
	sort.Slice(s.Problems, func(a, b int) bool {
		pa, pb := s.Problems[a], s.Problems[b]
		if pa.Kind != pb.Kind {
			return order[pa.Kind] < order[pb.Kind]
		}
		return pa.Name < pb.Name
	})
	return s
}

// AllHold reports whether every injectable target (one that opts in, is not skipped and is not in
// conflict) holds exactly bundle (compared in canonical form), as far as the informers have seen: the
// rotation gate. It is false before the informers have synced, while a target has not been read, and
// for a bundle that does not parse.
func (i *Injector) AllHold(bundle []byte) bool {
	c := i.canonical(bundle)
	if c.err != nil {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.synced {
		return false
	}
	for k, st := range i.objects {
		if st.state == StateConflict {
			continue
		}
		m := i.meta(k)
		if m == nil || !optedIn(m) {
			continue // being forgotten
		}
		if !st.obs.current(m.UID, m.ResourceVersion) {
			return false // changed since it was last read: not known to hold it
		}
		if st.state == StateSkipped && st.obs.Skip != "" {
			continue
		}
		if !st.obs.holds(c.digest) {
			return false
		}
	}
	return true
}
