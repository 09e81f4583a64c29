// Package injector is the leader-only loop that injects certapi's CA bundle into the objects that opt in
// with the annotation certapi.dev/inject-ca-bundle: "true": ValidatingWebhookConfigurations and
// MutatingWebhookConfigurations (every webhooks[] entry whose clientConfig names a service),
// CustomResourceDefinitions (spec.conversion.webhook.clientConfig.caBundle, with strategy Webhook and a
// service), APIServices (spec.caBundle, unless local or insecureSkipTLSVerify) and ConfigMaps
// (data["ca.crt"], as PEM text, unless immutable), for clients that cannot mount a ClusterTrustBundle.
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
//     cluster-scoped objects are recorded in namespace default, as events.k8s.io does; those about a
//     ConfigMap, in its namespace.)
//   - A namespace's kube-root-ca.crt ConfigMap belongs to kube-controller-manager's root CA publisher,
//     which rewrites its ca.crt: annotated, it is refused like an object another injector claims
//     (reason ManagedByKubernetes), never written.
//   - A write kube-apiserver refuses for a reason retrying cannot fix (a ConfigMap that would pass
//     1 MiB, a field error, a request too large or malformed, a write an admission policy or RBAC
//     forbids) makes the target Failed at once: a Warning Event (reason InjectionFailed) on it, counted
//     and named in the summary, and no longer waited for by the rotation gate, so no tenant's object can
//     hold a rotation. It is tried again when the object changes or the bundle does, never on a timer.
//     A conflict (409) or a JSON patch that no longer applies is a race, read again and retried; 429
//     and 5xx back off and retry.
//   - Removing the annotation stops management and leaves the caBundle as it is.
//
// It watches the five kinds with metadata-only informers, whose cache keeps only names, UIDs,
// resourceVersions and the annotations that matter, and reads in full only the objects that opt in,
// once per change; an object it patched is not read again (the patch response is the new state).
//
// The code is laid out by concern: injector.go (Options, New, Run), informers.go (what the metadata
// informers keep, and their event handlers), sync.go (bringing one object up to date), decide.go
// (what to write, as a pure function of an observation and the bundle), state.go (per-object state,
// fight detection, Summary and AllHold) and bundle.go (the canonical bundle). kinds.go holds the
// registry of target kinds over a shared accessor; each kind has its own file (webhookconfiguration.go,
// crd.go, apiservice.go, configmaps.go) with its observe function.
package injector

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
)

const (
	// ReportingController is the reportingController of the Events the injector records.
	ReportingController = "certapi.dev/injector"
)

// Defaults and timing. The fight and cool-down figures are part of the behaviour DESIGN.md promises.
const (
	// DefaultWorkers is the number of objects handled concurrently when Options.Workers is zero.
	DefaultWorkers = 8
	// DefaultConflictCooldown is the conflict cool-down when Options.ConflictCooldown is zero.
	DefaultConflictCooldown = 5 * time.Minute

	// An object is in conflict when restoring its caBundle would make more than fightLimit restorations
	// within fightWindow; it is then left alone for Options.ConflictCooldown, or until an annotation
	// changes.
	fightLimit  = 3
	fightWindow = time.Minute
	// Failed reads and writes back off per object from errorBackoffBase to errorBackoffMax. A write
	// refused because the object changed under it is retried after errorBackoffBase.
	errorBackoffBase = 50 * time.Millisecond
	errorBackoffMax  = 5 * time.Minute
)

// BundleSource gives the trust bundle to inject, and says when it changes (one type for every reader).
type BundleSource = controller.BundleSource

// Options configures New.
type Options struct {
	// Context is the leadership term's: its clients need get, list, watch and patch on
	// validatingwebhookconfigurations and mutatingwebhookconfigurations (admissionregistration.k8s.io),
	// customresourcedefinitions (apiextensions.k8s.io), apiservices (apiregistration.k8s.io) and
	// configmaps (in every namespace), and
	// create and patch on events (events.k8s.io). Required.
	Context *controller.Context
	// Source gives the bundle and tells when it changes. Required.
	Source BundleSource
	// Clock is used for the fight window and the conflict cool-down; the real clock when nil.
	Clock clock.Clock
	// Workers is the number of objects handled concurrently; DefaultWorkers when zero.
	Workers int
	// ConflictCooldown is how long an object whose caBundle another writer keeps overwriting is left
	// alone once it is reported as a conflict, before certapi reads it and restores its caBundle again
	// (a change to any of the object's annotations ends the cool-down sooner). A longer one means fewer
	// writes against a writer that never stops; a shorter one, a quicker return once it has. Zero means
	// DefaultConflictCooldown.
	ConflictCooldown time.Duration
	// Logger logs what the injector does outside a sync, when the Source's bundle changes; klog's own,
	// named "injector", when unset.
	Logger klog.Logger
}

// Injector injects the CA bundle. Make one with New for each leadership term; the term runs it. It is a
// controller.Notifier: its listeners are told after each target was synced, when the target's state may
// have changed (the rotation gate listens).
type Injector struct {
	source   BundleSource
	recorder events.EventRecorder
	logger   klog.Logger
	clock    clock.Clock
	// changes tells the listeners (see AddListener).
	changes controller.Listeners

	kinds     map[Kind]*kindClient
	informers map[Kind]cache.SharedIndexInformer
	queue     *controller.Queue[key]

	// conflictCooldown is Options.ConflictCooldown, defaulted.
	conflictCooldown time.Duration

	// synced reports, for each target kind, whether the term's handler has seen the informer's first list.
	synced []cache.InformerSynced

	mu      sync.Mutex
	objects map[key]*objState
	// lastBundle is the digest of the bundle every target was last triggered for; haveBundle says the
	// Source had one then.
	lastBundle digest
	haveBundle bool

	bundleMu    sync.Mutex
	bundleCache map[digest]canonicalBundle
}

// New checks o and declares on the term's Context the metadata informers of every target kind and the
// Source's listener. Nothing runs until the term does.
func New(o Options) (*Injector, error) {
	switch {
	case o.Context == nil:
		return nil, errors.New("injector: Options.Context is required")
	case o.Source == nil:
		return nil, errors.New("injector: Options.Source is required")
	case o.Workers < 0:
		return nil, fmt.Errorf("injector: Options.Workers is %d; expected 0 (default %d) or more", o.Workers, DefaultWorkers)
	case o.ConflictCooldown < 0:
		return nil, fmt.Errorf("injector: Options.ConflictCooldown is %s; expected 0 (default %s) or more", o.ConflictCooldown, DefaultConflictCooldown)
	}
	cc := o.Context
	i := &Injector{
		source:           o.Source,
		recorder:         cc.Recorder(ReportingController),
		logger:           o.Logger,
		clock:            o.Clock,
		kinds:            newKindClients(clientsets{kube: cc.Kube, ext: cc.APIExtensions, agg: cc.Aggregator}),
		informers:        map[Kind]cache.SharedIndexInformer{},
		conflictCooldown: o.ConflictCooldown,
		objects:          map[key]*objState{},
		bundleCache:      map[digest]canonicalBundle{},
	}
	if i.clock == nil {
		i.clock = clock.RealClock{}
	}
	if i.conflictCooldown == 0 {
		i.conflictCooldown = DefaultConflictCooldown
	}
	workers := o.Workers
	if workers == 0 {
		workers = DefaultWorkers
	}
	// No resync: a change to any target arrives as a watch event, and a resync would read every
	// target in full again, periodically, for nothing.
	factory := metadatainformer.NewSharedInformerFactoryWithOptions(cc.Metadata, 0, metadatainformer.WithTransform(trimMetadata))
	for _, kind := range Kinds {
		inf := factory.ForResource(i.kinds[kind].gvr).Informer()
		i.informers[kind] = inf
		i.synced = append(i.synced, cc.Watch(inf, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { i.onObject(kind, obj) },
			UpdateFunc: func(_, obj any) { i.onObject(kind, obj) },
			DeleteFunc: func(obj any) { i.onDelete(kind, obj) },
		}))
	}
	cc.AddFactory(factory)
	qo := controller.QueueOptions[key]{
		Name: "injector", Workers: workers, Sync: i.syncAndTell,
		BackoffBase: errorBackoffBase, BackoffMax: errorBackoffMax,
		// Most likely the resourceVersion test failed: the object changed since it was read. It is read
		// again; a write that is really invalid keeps failing, backs off and is reported.
		Quiet: func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsInvalid(err) },
	}
	if c, ok := i.clock.(clock.WithTicker); ok {
		qo.Clock = c
	}
	i.queue = controller.NewQueue(qo)
	// Every target is queued by the initial lists; from then on a new bundle re-checks them all.
	if i.logger.GetSink() == nil {
		i.logger = klog.Background().WithName("injector")
	}
	i.bundleChanged(i.logger)
	cc.Listen(o.Source, i.onBundle)
	return i, nil
}

// Run injects until ctx ends (when this replica stops leading): the term calls it once every cache has
// synced. Its run is its queue's, which runs once.
func (i *Injector) Run(ctx context.Context) error { return i.queue.Run(ctx) }

// ShutDown stops the queue of an Injector whose term ended before it ran.
func (i *Injector) ShutDown() { i.queue.ShutDown() }

// AddListener tells lis after each target was synced (controller.Notifier).
func (i *Injector) AddListener(lis dynamiccertificates.Listener) (remove func()) {
	return i.changes.AddListener(lis)
}

// HasSynced reports whether the term's handlers have seen the first full list of every target kind.
// Until then Summary may miss targets and AllHold is false. It is a cache.InformerSynced, for
// cache.WaitForCacheSync.
func (i *Injector) HasSynced() bool {
	if len(i.synced) == 0 {
		return false
	}
	for _, synced := range i.synced {
		if !synced() {
			return false
		}
	}
	return true
}

// InjectionSummary is Summary as CertificateAuthority status.injection: the injector is one target of
// the rotation (see rotation.Target).
func (i *Injector) InjectionSummary() certapiv1alpha1.InjectionSummary {
	return *i.Summary().InjectionSummary()
}

// onBundle is the Source's listener: a new bundle re-checks every target.
func (i *Injector) onBundle() {
	if i.bundleChanged(i.logger) {
		i.logger.V(2).Info("The CA bundle changed; re-checking every target")
		i.Trigger()
	}
}

// Trigger re-checks every target now. Run does it when the Source says the bundle changed.
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

// bundleChanged records the Source's current bundle and reports whether it differs from the one recorded
// before (the first call only sets the baseline).
func (i *Injector) bundleChanged(logger klog.Logger) bool {
	pem, d, err := i.currentBundle()
	have := pem != nil && err == nil
	i.mu.Lock()
	defer i.mu.Unlock()
	if err != nil && i.haveBundle {
		logger.Error(err, "The CA bundle to inject does not parse; nothing is written until it does")
	}
	changed := have != i.haveBundle || d != i.lastBundle
	i.lastBundle, i.haveBundle = d, have
	return changed
}
