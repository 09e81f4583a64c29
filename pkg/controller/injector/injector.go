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
//
// The code is laid out by concern: injector.go (Options, New, Run), informers.go (what the metadata
// informers keep, and their event handlers), sync.go (bringing one object up to date), decide.go
// (what to write, as a pure function of an observation and the bundle), state.go (per-object state,
// fight detection, Summary and AllHold) and bundle.go (the canonical bundle). kinds.go holds the
// registry of target kinds over a shared accessor; each kind has its own file (webhookconfiguration.go,
// crd.go, apiservice.go) with its observe function.
package injector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
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
)

const (
	// AnnotationInject opts an object in when its value is "true".
	AnnotationInject = "certapi.dev/inject-ca-bundle"
	// FieldManager is the field manager of every write.
	FieldManager = "certapi"
	// ReportingController is the reportingController of the Events the injector records when it makes
	// its own recorder.
	ReportingController = "certapi.dev/injector"
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
		kinds:              newKindClients(clientsets{kube: kube, ext: ext, agg: agg}),
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
