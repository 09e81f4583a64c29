// Package servedcert is the leader's verifier of what is served: for every object certapi injects its
// bundle into whose caBundle slot names a Service (the injector's ServedTargets: webhooks of Validating-
// and MutatingWebhookConfigurations, CRD conversion webhooks, APIServices), it resolves the Service's
// ready endpoints from its EndpointSlices, does a TLS handshake with each (pkg/servedcert.Probe, with the
// server name kube-apiserver checks, <service>.<namespace>.svc; no request byte is sent) and classifies
// the presented chain against the bundle certapi injected into that object (pkg/servedcert.Classify).
//
// Probes are driven by change (the injector's targets and bundle, the Services' and EndpointSlices'
// events) and repeated at a jittered interval, because a server can change its certificate with no API
// event. They are bounded: a small pool of workers, a timeout each, at most one in flight per endpoint
// (the queue never syncs one key twice at once), and an endpoint shared by several targets is probed once.
// Results show as Events on the injected object when a target's state changes, as the metric
// certapi_served_certificates{state}, in CertificateAuthority/default status.served, and through Results
// for the rest of the leader.
package servedcert

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/pkg/controller/status"
	certapilisters "github.com/certapi/certapi/pkg/generated/listers/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/servedcert"
	"github.com/certapi/certapi/pkg/signer"
)

// ReportingController is the reportingController of the verifier's Events.
const ReportingController = "certapi.dev/servedcert"

// Defaults.
const (
	// DefaultInterval is how often each endpoint is probed again with no event (jittered by ±10%).
	DefaultInterval = 2 * time.Minute
	// DefaultTimeout bounds one probe: the connection and the TLS handshake (kube-apiserver's own
	// webhook timeout defaults to 10s).
	DefaultTimeout = 5 * time.Second
	// DefaultWorkers is how many endpoints are probed at once.
	DefaultWorkers = 4
	// maxWorst bounds the worst targets Results' summary names.
	maxWorst = 10
	// coalesce gathers bursts of events (a thousand targets taking a new bundle) into one look.
	coalesce = 200 * time.Millisecond
)

// TargetSource lists the targets to verify and tells when they may have changed: the injector.
type TargetSource interface {
	// ServedTargets returns the bundle every listed target holds and the targets (see
	// injector.ServedTargets).
	ServedTargets() ([]byte, []injector.ServedTarget)
	controller.Notifier
}

// Options configure New.
type Options struct {
	// Context is the leadership term's: its Kube client needs list and watch on services and
	// endpointslices (discovery.k8s.io) in every namespace, and create and patch on events. Required.
	Context *controller.Context
	// Targets is the injector. Required.
	Targets TargetSource
	// Interval is how often each endpoint is probed again with no event; DefaultInterval when zero.
	Interval time.Duration
	// Timeout bounds each probe; DefaultTimeout when zero.
	Timeout time.Duration
	// Workers is how many endpoints are probed at once; DefaultWorkers when zero.
	Workers int
	// Clock tells the time of a classification; the real clock when nil.
	Clock clock.PassiveClock
	// Requests, when set, writes the Serving condition of the ServingCertRequests whose Service a checked
	// slot names (the leader's in-process status updater).
	Requests status.Updater
	// Probe is servedcert.Probe unless a test replaces it.
	Probe func(ctx context.Context, addr, serverName string, timeout time.Duration) ([]*x509.Certificate, error)
}

// probeKey is one endpoint as one server name dials it: the unit of probing.
type probeKey struct {
	Addr, ServerName string
}

// job is what a key of the controller's queue asks for.
type job int

const (
	// jobProbe probes key.probe.
	jobProbe job = iota
	// jobRefresh reads the targets and resolves their endpoints.
	jobRefresh
	// jobPublish classifies the last probes and publishes the results (coalesced).
	jobPublish
	// jobStatus writes CertificateAuthority/default status.served.
	jobStatus
	// jobRequest writes the Serving condition of the ServingCertRequest key.request.
	jobRequest
)

// key is one unit of the controller's work.
type key struct {
	job     job
	probe   probeKey
	request types.NamespacedName
}

var (
	refreshKey = key{job: jobRefresh}
	publishKey = key{job: jobPublish}
	statusKey  = key{job: jobStatus}
)

// probeState is what the verifier knows of one endpoint.
type probeState struct {
	// probed is whether a probe completed; chain and err are its outcome, at is when.
	probed bool
	chain  []*x509.Certificate
	err    error
	at     time.Time
	// due is when the periodic re-probe is due; forced says an event asked for a probe before it.
	due    time.Time
	forced bool
}

// targetState is one target and where its Service leads.
type targetState struct {
	addrs []string
	why   string
	// last is the state last reported in an Event; "" before the first.
	last servedcert.State
	// classified holds, by address, the classification of the endpoint's last probe, so that a
	// publication classifies only what changed: a thousand targets make a publication every coalesce
	// interval during a round, and verifying every chain each time cost ten times the probes.
	classified map[string]classified
}

// classified is one endpoint's classification and what it was made from.
type classified struct {
	// probedAt is the probe's time and bundleGen the bundle's generation; at is when it was made.
	probedAt, at time.Time
	bundleGen    int
	result       servedcert.Result
}

// reclassifyAfter bounds how long a classification is reused with no new probe or bundle: time alone
// moves a certificate to ExpiringSoon or Expired.
const reclassifyAfter = 30 * time.Second

// Controller verifies what is served. Make one per leadership term with New; the term runs it. It is a
// controller.Notifier: its listeners are told when results were published.
type Controller struct {
	o        Options
	recorder events.EventRecorder
	queue    *controller.Queue[key]
	services cache.Indexer
	slices   cache.Indexer
	changes  controller.Listeners

	mu       sync.Mutex
	bundle   []byte
	cas      []*x509.Certificate
	bundleOK bool
	// bundleGen counts the bundle's changes: a classification made against an older one is made again.
	bundleGen int
	targets   map[injector.ServedTarget]*targetState
	probes    map[probeKey]*probeState
	// inUse are the Services ("<namespace>/<name>") some target names; dirty those whose objects changed
	// since the last refresh.
	inUse   map[string]bool
	dirty   map[string]bool
	results []TargetResult
	// summary is results as CertificateAuthority status.served (nil before the first publication).
	summary *certapiv1alpha1.ServedSummary

	caLister certapilisters.CertificateAuthorityLister
	// requests lists ServingCertRequests (nil without Options.Requests); services are the published
	// results by the Service their slot names (byService).
	requests  certapilisters.ServingCertRequestLister
	byService map[types.NamespacedName][]TargetResult
	// urgent are the CAs whose leaves' endpoints are probed every UrgentInterval (Expedite).
	urgent []*x509.Certificate
}

// New checks o and declares on the term's Context the Service and EndpointSlice informers and the
// listener on the injector.
func New(o Options) (*Controller, error) {
	switch {
	case o.Context == nil:
		return nil, errors.New("servedcert: Options.Context is required")
	case o.Targets == nil:
		return nil, errors.New("servedcert: Options.Targets is required")
	case o.Interval < 0, o.Timeout < 0, o.Workers < 0:
		return nil, fmt.Errorf("servedcert: Interval %s, Timeout %s and Workers %d must not be negative", o.Interval, o.Timeout, o.Workers)
	}
	if o.Interval == 0 {
		o.Interval = DefaultInterval
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Workers == 0 {
		o.Workers = DefaultWorkers
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Probe == nil {
		o.Probe = servedcert.Probe
	}
	cc := o.Context
	c := &Controller{
		o:        o,
		recorder: cc.Recorder(ReportingController),
		targets:  map[injector.ServedTarget]*targetState{},
		probes:   map[probeKey]*probeState{},
		inUse:    map[string]bool{},
		dirty:    map[string]bool{},
	}
	// +1 worker: the refresh, the publication and the status write never wait behind a pool of slow probes.
	c.queue = controller.NewQueue(controller.QueueOptions[key]{Name: "servedcert", Workers: o.Workers + 1, Sync: c.sync,
		Quiet: apierrors.IsConflict})
	cas := cc.CertapiInformers.Certapi().V1alpha1().CertificateAuthorities()
	c.caLister = cas.Lister()
	// status.served is written again when another writer's update of the object leaves it stale.
	cc.Watch(cas.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.queue.Add(statusKey) },
		UpdateFunc: func(any, any) { c.queue.Add(statusKey) },
	})
	// No resync: changes come as watch events, and re-probing has its own jittered timer.
	factory := informers.NewSharedInformerFactoryWithOptions(cc.Kube, 0, informers.WithTransform(trim))
	svcs := factory.Core().V1().Services().Informer()
	eps := factory.Discovery().V1().EndpointSlices().Informer()
	if err := eps.AddIndexers(cache.Indexers{serviceIndex: sliceService}); err != nil {
		return nil, fmt.Errorf("servedcert: indexing EndpointSlices by Service: %w", err)
	}
	c.services, c.slices = svcs.GetIndexer(), eps.GetIndexer()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.onObject,
		UpdateFunc: func(_, obj any) { c.onObject(obj) },
		DeleteFunc: c.onObject,
	}
	cc.Watch(svcs, handler)
	cc.Watch(eps, handler)
	cc.AddFactory(factory)
	if o.Requests != nil {
		scrs := cc.CertapiInformers.Certapi().V1alpha1().ServingCertRequests()
		c.requests = scrs.Lister()
		onRequest := func(obj any) {
			if k, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
				ns, name, _ := cache.SplitMetaNamespaceKey(k)
				c.queue.Add(key{job: jobRequest, request: types.NamespacedName{Namespace: ns, Name: name}})
			}
		}
		cc.Watch(scrs.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: onRequest, UpdateFunc: func(_, obj any) { onRequest(obj) }})
	}
	cc.Listen(o.Targets, func() { c.queue.AddAfter(refreshKey, coalesce) })
	c.queue.Add(refreshKey) // once the caches have synced, whatever they hold
	return c, nil
}

// Run verifies until ctx ends: the term calls it once every cache has synced.
func (c *Controller) Run(ctx context.Context) error {
	metrics.PublishServed(c)
	defer func() {
		metrics.PublishServed(nil)
		metrics.ServedCertificates.Reset()
	}()
	return c.queue.Run(ctx)
}

// EachServed calls f with every published result, for the per-target series of /metrics
// (metrics.ServedSource).
func (c *Controller) EachServed(f func(metrics.ServedTarget)) {
	for _, r := range c.Results() {
		t := metrics.ServedTarget{Kind: string(r.Target.Kind), Name: r.Target.Name, Webhook: r.Target.Slot, State: string(r.State)}
		for _, e := range r.Endpoints {
			if !e.NotAfter.IsZero() {
				t.Endpoints = append(t.Endpoints, metrics.ServedEndpoint{Address: e.Address, NotAfter: e.NotAfter})
			}
		}
		f(t)
	}
}

// ShutDown stops the queue of a Controller whose term ended before it ran.
func (c *Controller) ShutDown() { c.queue.ShutDown() }

// AddListener tells lis whenever results were published (controller.Notifier).
func (c *Controller) AddListener(lis dynamiccertificates.Listener) (remove func()) {
	return c.changes.AddListener(lis)
}

// Results returns the last published result of every target whose endpoints have all been probed, in
// order of kind, name and webhook.
func (c *Controller) Results() []TargetResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.results)
}

// onObject notes a change to a Service or an EndpointSlice: when a target names its Service, the
// target list is refreshed and that Service's endpoints probed again.
func (c *Controller) onObject(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	var svc string
	switch o := obj.(type) {
	case *corev1.Service:
		svc = o.Namespace + "/" + o.Name
	case *discoveryv1.EndpointSlice:
		svc = o.Namespace + "/" + o.Labels[discoveryv1.LabelServiceName]
	default:
		return
	}
	c.mu.Lock()
	used := c.inUse[svc]
	if used {
		c.dirty[svc] = true
	}
	c.mu.Unlock()
	if used {
		c.queue.AddAfter(refreshKey, coalesce)
	}
}

func (c *Controller) sync(ctx context.Context, k key) (controller.Result, error) {
	switch k.job {
	case jobRefresh:
		c.refresh(ctx)
	case jobPublish:
		c.publish(ctx)
	case jobStatus:
		return controller.Result{}, c.writeStatus(ctx)
	case jobRequest:
		return controller.Result{}, c.writeServing(ctx, k.request)
	case jobProbe:
		return c.probe(ctx, k.probe), nil
	}
	return controller.Result{}, nil
}

// refresh reads the targets and the bundle, resolves every target's endpoints, starts probing new
// endpoints (and again those of changed Services, or all of them after a bundle change), forgets those
// no target names any more, and publishes.
func (c *Controller) refresh(ctx context.Context) {
	bundle, targets := c.o.Targets.ServedTargets()
	type resolved struct {
		addrs []string
		why   string
	}
	res := make(map[injector.ServedTarget]resolved, len(targets))
	for _, t := range targets {
		addrs, why := servedcert.Resolve(t.Service, c.service(t.Service), c.endpointSlices(t.Service))
		res[t] = resolved{addrs, why}
	}

	c.mu.Lock()
	all := false
	if string(bundle) != string(c.bundle) {
		c.bundle, all = bundle, true
		c.cas, c.bundleOK = nil, false
		c.bundleGen++
		if cas, err := signer.ParseBundle(bundle); err == nil && len(cas) > 0 {
			c.cas, c.bundleOK = cas, true
		} else if bundle != nil {
			klog.FromContext(ctx).Error(err, "The bundle to verify against does not parse; nothing is classified until it does")
		}
	}
	wanted := map[probeKey]bool{}
	inUse := map[string]bool{}
	var probe []probeKey
	newTargets := make(map[injector.ServedTarget]*targetState, len(res))
	for t, r := range res {
		st := c.targets[t]
		if st == nil {
			st = &targetState{}
		}
		st.addrs, st.why = r.addrs, r.why
		for a := range st.classified {
			if !slices.Contains(st.addrs, a) {
				delete(st.classified, a) // an endpoint gone
			}
		}
		newTargets[t] = st
		svc := t.Service.Namespace + "/" + t.Service.Name
		inUse[svc] = true
		for _, a := range r.addrs {
			k := probeKey{Addr: a, ServerName: t.Service.ServerName()}
			if wanted[k] {
				continue
			}
			wanted[k] = true
			ps := c.probes[k]
			if ps == nil {
				ps = &probeState{}
				c.probes[k] = ps
			}
			if !ps.probed || all || c.dirty[svc] {
				ps.forced = true
				probe = append(probe, k)
			}
		}
	}
	for k := range c.probes {
		if !wanted[k] {
			delete(c.probes, k) // its periodic re-probe finds no state and stops
		}
	}
	c.targets, c.inUse, c.dirty = newTargets, inUse, map[string]bool{}
	c.mu.Unlock()

	for _, k := range probe {
		c.queue.Add(key{job: jobProbe, probe: k})
	}
	c.queue.Add(publishKey) // one key: publications never run two at once
}

// service returns the cached Service ref names, or nil.
func (c *Controller) service(ref servedcert.ServiceRef) *corev1.Service {
	obj, ok, err := c.services.GetByKey(ref.Namespace + "/" + ref.Name)
	if err != nil || !ok {
		return nil
	}
	svc, _ := obj.(*corev1.Service)
	return svc
}

// endpointSlices returns the cached EndpointSlices of the Service ref names.
func (c *Controller) endpointSlices(ref servedcert.ServiceRef) []*discoveryv1.EndpointSlice {
	objs, err := c.slices.ByIndex(serviceIndex, ref.Namespace+"/"+ref.Name)
	if err != nil {
		return nil
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*discoveryv1.EndpointSlice); ok {
			out = append(out, s)
		}
	}
	return out
}

// probe probes one endpoint, unless no target names it any more or this is a periodic re-probe that an
// event-driven probe made early (then it only sets the timer for when it is due), and asks for the
// results to be published. It returns when to probe again.
func (c *Controller) probe(ctx context.Context, k probeKey) controller.Result {
	now := c.o.Clock.Now()
	c.mu.Lock()
	ps := c.probes[k]
	if ps == nil {
		c.mu.Unlock()
		return controller.Result{} // no target names it any more
	}
	if !ps.forced && ps.probed && now.Before(ps.due) {
		// An event-driven probe ran since this timer was set. The queue keeps only the earliest timer
		// of a key, so the later one that probe asked for may be gone: ask for it again.
		due := ps.due
		c.mu.Unlock()
		return controller.Result{After: due.Sub(now) + time.Second}
	}
	ps.forced = false
	c.mu.Unlock()

	chain, err := c.o.Probe(ctx, k.Addr, k.ServerName, c.o.Timeout)
	if ctx.Err() != nil {
		return controller.Result{}
	}
	next := jitter(c.o.Interval, rand.Float64())
	c.mu.Lock()
	if err == nil && signedByOneOf(chain, c.urgent) {
		next = min(next, UrgentInterval)
	}
	if cur := c.probes[k]; cur == ps {
		ps.probed, ps.chain, ps.err, ps.at = true, chain, err, c.o.Clock.Now()
		ps.due = ps.at.Add(next - time.Second) // a timer that fires a little early still probes
	}
	c.mu.Unlock()
	c.queue.AddAfter(publishKey, coalesce)
	return controller.Result{After: next}
}

// publish classifies every target from its endpoints' last probes, records an Event on each object
// whose target changed state (or was first found not Verified), sets the metric, queues the status
// writes and tells the listeners.
func (c *Controller) publish(ctx context.Context) {
	now := c.o.Clock.Now()
	c.mu.Lock()
	if !c.bundleOK {
		c.mu.Unlock()
		return
	}
	var results []TargetResult
	var changed []TargetResult
	for t, st := range c.targets {
		eps := make([]*EndpointResult, len(st.addrs))
		for n, a := range st.addrs {
			ps := c.probes[probeKey{Addr: a, ServerName: t.Service.ServerName()}]
			if ps == nil || !ps.probed {
				continue
			}
			eps[n] = &EndpointResult{Address: a, Result: c.classify(t, st, a, ps, now)}
		}
		tr, ok := Aggregate(t, st.why, eps)
		if !ok {
			continue
		}
		results = append(results, tr)
		// The first finding of a term is an Event only when it is not Verified: a new leader does not
		// announce every healthy webhook again.
		if tr.State != st.last && (st.last != "" || tr.State != servedcert.Verified) {
			changed = append(changed, tr)
		}
		st.last = tr.State
	}
	sortResults(results)
	c.results = results
	summary := ServedSummary(results)
	write := !apiequality.Semantic.DeepEqual(summary, c.summary)
	c.summary = summary
	services := byService(results)
	changedSvcs := changedServices(c.byService, services)
	c.byService = services
	c.mu.Unlock()
	if write {
		c.queue.Add(statusKey)
	}
	c.queueRequests(changedSvcs)

	counts := map[servedcert.State]int{}
	for _, r := range results {
		if r.State == servedcert.NoEndpoints {
			counts[r.State]++
			continue
		}
		for _, e := range r.Endpoints {
			counts[e.State]++
		}
	}
	for _, s := range servedcert.States {
		metrics.ServedCertificates.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	sortResults(changed)
	for _, r := range changed {
		c.event(ctx, r)
	}
	c.changes.Notify()
}

// event records r's new state as an Event on the object it is about: Normal for Verified (a slot that
// recovered), Warning otherwise.
func (c *Controller) event(ctx context.Context, r TargetResult) {
	typ := corev1.EventTypeWarning
	if r.State == servedcert.Verified {
		typ = corev1.EventTypeNormal
	}
	msg := fmt.Sprintf("%s: %s", Describe(r.Target), r.Message)
	if len(msg) > 1000 {
		msg = msg[:997] + "..."
	}
	klog.FromContext(ctx).V(2).Info("Served certificate state changed", "target", Describe(r.Target), "state", r.State, "message", r.Message)
	c.recorder.Eventf(regarding(r.Target), nil, typ, string(r.State), "VerifyServedCertificate", "%s", msg)
}

// classify is the classification of the last probe ps of t's endpoint a: the one made before when
// neither the probe nor the bundle changed since and it is younger than reclassifyAfter, else a new
// one, kept in st. Called with c.mu held.
func (c *Controller) classify(t injector.ServedTarget, st *targetState, a string, ps *probeState, now time.Time) servedcert.Result {
	if cl, ok := st.classified[a]; ok && cl.probedAt.Equal(ps.at) && cl.bundleGen == c.bundleGen && now.Sub(cl.at) < reclassifyAfter {
		return cl.result
	}
	r := servedcert.ProbeError(ps.err)
	if ps.err == nil {
		r = servedcert.Classify(ps.chain, c.bundleOf(t), t.Service.ServerName(), now, 0)
	}
	if st.classified == nil {
		st.classified = map[string]classified{}
	}
	st.classified[a] = classified{probedAt: ps.at, at: now, bundleGen: c.bundleGen, result: r}
	return r
}

// bundleOf is what t's slot trusts: certapi's bundle, and the foreign CAs the slot keeps after it. Called
// with c.mu held.
func (c *Controller) bundleOf(t injector.ServedTarget) []*x509.Certificate {
	if t.Foreign == "" {
		return c.cas
	}
	foreign, err := signer.ParseBundle([]byte(t.Foreign))
	if err != nil {
		return c.cas // the injector kept them only once they parsed
	}
	return append(slices.Clip(c.cas), foreign...)
}

// sortResults orders results by kind (in injector.Kinds order), name and webhook.
func sortResults(rs []TargetResult) {
	order := map[injector.Kind]int{}
	for n, k := range injector.Kinds {
		order[k] = n
	}
	slices.SortFunc(rs, func(a, b TargetResult) int {
		switch {
		case a.Target.Kind != b.Target.Kind:
			return order[a.Target.Kind] - order[b.Target.Kind]
		case a.Target.Name != b.Target.Name:
			if a.Target.Name < b.Target.Name {
				return -1
			}
			return 1
		case a.Target.Slot < b.Target.Slot:
			return -1
		case a.Target.Slot > b.Target.Slot:
			return 1
		}
		return 0
	})
}
