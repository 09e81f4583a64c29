// Package podcert is the leader's signer of PodCertificateRequests for certapi.dev/serving: kubelet makes
// a key on the node and a PodCertificateRequest for a pod's podCertificate projected volume, and this
// signer answers it once, through the PodCertificateRequest's status subresource (or leaves it pending, with
// a Warning Event, until the ServingCertRequest it names exists): Issued with a
// certificate for the ServingCertRequest the volume's userAnnotations name (exactly what the request
// would get from any other path, through the one issuance policy, issuer.Policy, on issuer.PathPCR), or
// Denied with the API's reasons (UnsupportedKeyType, InvalidUnverifiedUserAnnotations) or certapi's own
// (see Decide). The pod is checked against the API, not a cache. Nothing is kept per PodCertificateRequest
// beyond the informer's copy, which drops the request and the certificate once it is answered.
//
// The shape is kubernetes' rootcacertpublisher: an informer (PodCertificateRequests with spec.signerName
// certapi.dev/serving, by a field selector), the term's queue, and one sync function around a pure Decide.
package podcert

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	certapilisters "github.com/certapi/certapi/pkg/generated/listers/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
)

// ReportingController is the reportingController of the signer's Events.
const ReportingController = "certapi.dev/podcert"

// DefaultWorkers is how many PodCertificateRequests are answered at once when Options.Workers is zero.
const DefaultWorkers = 8

// maxNoteLength bounds an Event's note (the API's limit is 1 kB).
const maxNoteLength = 1000

// Options configure New.
type Options struct {
	// Context is the leadership term's: its Kube client needs list and watch on podcertificaterequests,
	// patch on podcertificaterequests/status, sign on signers/certapi.dev/serving (certificates.k8s.io),
	// and get on pods. Required.
	Context *controller.Context
	// Authority signs, through the one issuance policy. Required.
	Authority issuer.Authority
	// Workers is how many PodCertificateRequests are answered at once; DefaultWorkers when zero.
	Workers int
	// Clock stamps the conditions; the real clock when nil.
	Clock clock.PassiveClock
}

// Signer answers PodCertificateRequests for certapi.dev/serving. Make one per leadership term with New;
// the term runs it.
type Signer struct {
	kube      kubernetes.Interface
	certapi   versioned.Interface
	authority issuer.Authority
	recorder  events.EventRecorder
	clock     clock.PassiveClock

	informer cache.SharedIndexInformer
	lister   certificateslisters.PodCertificateRequestLister
	reqs     certapilisters.ServingCertRequestLister
	queue    *controller.Queue[string]
}

// New checks o and declares on the term's Context the informers the signer watches:
// PodCertificateRequests for certapi.dev/serving, and the term's ServingCertRequests.
func New(o Options) (*Signer, error) {
	switch {
	case o.Context == nil:
		return nil, errors.New("podcert: Options.Context is required")
	case o.Authority == nil:
		return nil, errors.New("podcert: Options.Authority is required")
	case o.Workers < 0:
		return nil, fmt.Errorf("podcert: Options.Workers is %d; expected 0 (default %d) or more", o.Workers, DefaultWorkers)
	}
	cc := o.Context
	factory := informers.NewSharedInformerFactoryWithOptions(cc.Kube, 0,
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("spec.signerName", certapiv1alpha1.PodCertificateSignerName).String()
		}),
		informers.WithTransform(trim))
	inf := factory.Certificates().V1().PodCertificateRequests()
	if err := inf.Informer().AddIndexers(cache.Indexers{byRequest: pendingByRequest}); err != nil {
		return nil, fmt.Errorf("podcert: indexing PodCertificateRequests: %w", err)
	}
	cc.AddFactory(factory)
	reqs := cc.CertapiInformers.Certapi().V1alpha1().ServingCertRequests()
	s := &Signer{
		kube:      cc.Kube,
		certapi:   cc.Certapi,
		authority: o.Authority,
		recorder:  cc.Recorder(ReportingController),
		clock:     o.Clock,
		informer:  inf.Informer(),
		lister:    inf.Lister(),
		reqs:      reqs.Lister(),
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	workers := o.Workers
	if workers == 0 {
		workers = DefaultWorkers
	}
	s.queue = controller.NewQueue(controller.QueueOptions[string]{
		Name: "podcertificaterequests", Workers: workers, Sync: s.sync,
		BackoffBase: 50 * time.Millisecond, BackoffMax: time.Minute,
		Quiet: apierrors.IsConflict,
	})
	cc.Watch(inf.Informer(), cache.ResourceEventHandlerFuncs{
		AddFunc:    s.enqueue,
		UpdateFunc: func(_, obj any) { s.enqueue(obj) },
	})
	// A PodCertificateRequest that waits for its ServingCertRequest is looked at again when it appears.
	cc.Watch(reqs.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: s.onRequestAdd})
	return s, nil
}

// byRequest indexes pending PodCertificateRequests by the ServingCertRequest they name
// (<namespace>/<name>), so that one that waits for its request is looked at again when it appears.
const byRequest = "servingCertRequest"

func pendingByRequest(obj any) ([]string, error) {
	pcr, ok := obj.(*certificatesv1.PodCertificateRequest)
	if !ok || answered(pcr) || RequestName(pcr) == "" {
		return nil, nil
	}
	return []string{pcr.Namespace + "/" + RequestName(pcr)}, nil
}

// trim is the informer's transform: managed fields and the metadata a writer chooses (labels,
// annotations, finalizers, owner references: the signer reads none of them) go; the userAnnotations are
// cut to what Decide reads (see TrimUserAnnotations); and so do the stub request, the certificate and the
// userAnnotations of a PodCertificateRequest that is answered (it is never looked at again), so that the
// cache of answered requests costs little until kube-controller-manager's cleaner deletes them. A node
// may put up to 256 KiB of userAnnotations into every request; none of it reaches the cache.
func trim(obj any) (any, error) {
	pcr, ok := obj.(*certificatesv1.PodCertificateRequest)
	if !ok {
		return obj, nil
	}
	pcr.ManagedFields = nil
	pcr.Labels = nil
	pcr.Annotations = nil
	pcr.Finalizers = nil
	pcr.OwnerReferences = nil
	if answered(pcr) {
		pcr.Spec.StubPKCS10Request = nil
		pcr.Spec.UnverifiedUserAnnotations = nil
		pcr.Status.CertificateChain = ""
		return pcr, nil
	}
	pcr.Spec.UnverifiedUserAnnotations = TrimUserAnnotations(pcr.Spec.UnverifiedUserAnnotations)
	return pcr, nil
}

// maxKeptUnknownKeys is how many unknown userAnnotations keys TrimUserAnnotations keeps, for the denial
// to name; maxKeptLength is how much of a kept key or of the request name it keeps.
const (
	maxKeptUnknownKeys = 8
	maxKeptLength      = utilvalidation.DNS1123SubdomainMaxLength + 1
)

// TrimUserAnnotations returns what Decide needs of a PodCertificateRequest's userAnnotations, in a new
// map: the value of certapi.dev/servingcertrequest (one longer than any valid name, so a value too long
// is still refused as too long), and the names, not the values, of the first maxKeptUnknownKeys other
// keys in sorted order, so that the denial still names them; when there were more, a last key
// "…and N more" (no valid annotation key, so it cannot be mistaken for one) says how many. Decide
// decides the same on the result as on the original: a request with any unknown key is denied, one
// without is judged by its request name.
func TrimUserAnnotations(in map[string]string) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := map[string]string{}
	var unknown []string
	for k, v := range in {
		if k == certapiv1alpha1.UserAnnotationServingCertRequest {
			out[k] = cut(v)
			continue
		}
		unknown = append(unknown, k)
	}
	sort.Strings(unknown)
	for i, k := range unknown {
		if i == maxKeptUnknownKeys {
			out[fmt.Sprintf("…and %d more", len(unknown)-i)] = ""
			break
		}
		out[cut(k)] = ""
	}
	return out
}

// cut keeps the first maxKeptLength bytes of s.
func cut(s string) string {
	if len(s) <= maxKeptLength {
		return s
	}
	return s[:maxKeptLength]
}

// answered reports whether a PodCertificateRequest is Issued, Denied or Failed: its status can no longer
// change.
func answered(pcr *certificatesv1.PodCertificateRequest) bool {
	for _, c := range pcr.Status.Conditions {
		switch c.Type {
		case certificatesv1.PodCertificateRequestConditionTypeIssued, certificatesv1.PodCertificateRequestConditionTypeDenied,
			certificatesv1.PodCertificateRequestConditionTypeFailed:
			return true
		}
	}
	return false
}

// Run answers PodCertificateRequests until ctx ends: the term calls it once every cache has synced. Its
// run is its queue's, which runs once.
func (s *Signer) Run(ctx context.Context) error { return s.queue.Run(ctx) }

// ShutDown stops the queue of a Signer whose term ended before it ran.
func (s *Signer) ShutDown() { s.queue.ShutDown() }

// enqueue queues a PodCertificateRequest that is not answered yet.
func (s *Signer) enqueue(obj any) {
	pcr, ok := obj.(*certificatesv1.PodCertificateRequest)
	if !ok || answered(pcr) {
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(pcr)
	if err == nil {
		s.queue.Add(key)
	}
}

// onRequestAdd queues the PodCertificateRequests that wait for a ServingCertRequest that appeared.
func (s *Signer) onRequestAdd(obj any) {
	r, ok := obj.(*certapiv1alpha1.ServingCertRequest)
	if !ok {
		return
	}
	waiting, err := s.informer.GetIndexer().ByIndex(byRequest, r.Namespace+"/"+r.Name)
	if err != nil {
		return
	}
	for _, pcr := range waiting {
		s.enqueue(pcr)
	}
}

func (s *Signer) sync(ctx context.Context, key string) (controller.Result, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return controller.Result{}, nil
	}
	pcr, err := s.lister.PodCertificateRequests(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return controller.Result{}, nil
	}
	if err != nil {
		return controller.Result{}, err
	}
	if answered(pcr) {
		return controller.Result{}, nil
	}
	start := time.Now()
	in := Input{PCR: pcr}
	if d, done := Precheck(pcr); done {
		return controller.Result{}, s.answer(ctx, in, d, start)
	}
	if in.Request, err = s.request(ctx, ns, RequestName(pcr)); err != nil {
		return controller.Result{}, err
	}
	pod, err := s.kube.CoreV1().Pods(ns).Get(ctx, pcr.Spec.PodName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return controller.Result{}, fmt.Errorf("getting pod %s/%s of PodCertificateRequest %s: %w", ns, pcr.Spec.PodName, name, err)
	default:
		in.Pod = pod
	}
	return controller.Result{}, s.answer(ctx, in, Decide(in), start)
}

// request returns the ServingCertRequest ns/name, or nil when there is none. The cache can lag a request
// created a moment ago, and a denial is final: a miss is checked against certapi's API.
func (s *Signer) request(ctx context.Context, ns, name string) (*certapiv1alpha1.ServingCertRequest, error) {
	r, err := s.reqs.ServingCertRequests(ns).Get(name)
	if err == nil {
		return r, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	r, err = s.certapi.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting ServingCertRequest %s/%s: %w", ns, name, err)
	}
	return r, nil
}

// answer writes the decision d into the PodCertificateRequest's status: a denial, or a certificate
// signed by the Authority.
func (s *Signer) answer(ctx context.Context, in Input, d Decision, start time.Time) error {
	pcr := in.PCR
	logger := klog.FromContext(ctx).WithValues("podCertificateRequest", klog.KObj(pcr), "pod", pcr.Spec.PodName)
	if d.Wait {
		s.event(in, corev1.EventTypeWarning, d.Reason, "SignPodCertificate",
			fmt.Sprintf("PodCertificateRequest %s of pod %s is pending: %s", pcr.Name, pcr.Spec.PodName, d.Message))
		logger.V(2).Info("A PodCertificateRequest waits", "reason", d.Reason, "message", d.Message)
		return nil
	}
	if d.Deny {
		if err := s.writeStatus(ctx, pcr, certificatesv1.PodCertificateRequestConditionTypeDenied, d.Reason, d.Message, nil); err != nil {
			return err
		}
		metrics.Issuances.WithLabelValues(issuer.PathPCR, "denied").Inc()
		s.event(in, corev1.EventTypeWarning, certificatesv1.PodCertificateRequestConditionTypeDenied, "SignPodCertificate",
			fmt.Sprintf("Denied PodCertificateRequest %s of pod %s: %s: %s", pcr.Name, pcr.Spec.PodName, d.Reason, d.Message))
		logger.V(2).Info("Denied a PodCertificateRequest", "reason", d.Reason, "message", d.Message)
		return nil
	}

	res, err := s.authority.Sign(d.Sign)
	if errors.Is(err, issuer.ErrNotLeading) {
		return err // the term is ending; the next leader answers
	}
	if err == nil && !LifetimeOK(res.NotBefore, res.NotAfter) {
		err = fmt.Errorf("the Active CA expires at %s, within the hour a pod certificate must last; its rotation is overdue", res.NotAfter.UTC().Format(time.RFC3339))
		d.Reason = ReasonLifetimeTooShort
	}
	if err != nil {
		reason := d.Reason
		if reason == "" {
			reason = "SigningFailed"
		}
		if werr := s.writeStatus(ctx, pcr, certificatesv1.PodCertificateRequestConditionTypeFailed, reason, err.Error(), nil); werr != nil {
			return werr
		}
		metrics.Issuances.WithLabelValues(issuer.PathPCR, "failed").Inc()
		s.event(in, corev1.EventTypeWarning, "Failed", "SignPodCertificate",
			fmt.Sprintf("Could not sign PodCertificateRequest %s of pod %s: %v", pcr.Name, pcr.Spec.PodName, err))
		return nil
	}

	refresh := BeginRefreshAt(res.NotBefore, res.NotAfter, res.RenewalTime)
	issued := &certificatesv1.PodCertificateRequestStatus{
		CertificateChain: res.CertificatePEM,
		NotBefore:        ptrTime(res.NotBefore),
		NotAfter:         ptrTime(res.NotAfter),
		BeginRefreshAt:   ptrTime(refresh),
	}
	msg := fmt.Sprintf("certificate %s for %s.%s.svc from ServingCertRequest %s", res.SerialNumber, d.Sign.ServiceName, d.Sign.Namespace, d.Sign.Name)
	if err := s.writeStatus(ctx, pcr, certificatesv1.PodCertificateRequestConditionTypeIssued, ReasonIssued, msg, issued); err != nil {
		if apierrors.IsInvalid(err) {
			// kube-apiserver refused the certificate (a clock far from certapi's, say): say so once,
			// rather than sign again and again.
			metrics.Issuances.WithLabelValues(issuer.PathPCR, "error").Inc()
			return s.writeStatus(ctx, pcr, certificatesv1.PodCertificateRequestConditionTypeFailed, "StatusRefused",
				truncate1k("kube-apiserver refused the issued certificate: "+err.Error()), nil)
		}
		return err
	}
	metrics.Issuances.WithLabelValues(issuer.PathPCR, "issued").Inc()
	metrics.IssuanceDuration.WithLabelValues(issuer.PathPCR).Observe(time.Since(start).Seconds())
	s.event(in, corev1.EventTypeNormal, certificatesv1.PodCertificateRequestConditionTypeIssued, "SignPodCertificate",
		fmt.Sprintf("Issued certificate %s to pod %s on node %s (PodCertificateRequest %s), valid until %s, refresh at %s",
			res.SerialNumber, pcr.Spec.PodName, pcr.Spec.NodeName, pcr.Name, res.NotAfter.UTC().Format(time.RFC3339), refresh.UTC().Format(time.RFC3339)))
	logger.V(2).Info("Issued a pod certificate", "serial", res.SerialNumber, "notAfter", res.NotAfter, "beginRefreshAt", refresh)
	return nil
}

// writeStatus sets the one terminal condition (and, for Issued, the certificate) with a patch of the
// status subresource, guarded by the resourceVersion the decision was made on. A request deleted meanwhile is
// done with.
func (s *Signer) writeStatus(ctx context.Context, pcr *certificatesv1.PodCertificateRequest, condType, reason, msg string,
	issued *certificatesv1.PodCertificateRequestStatus) error {
	st := certificatesv1.PodCertificateRequestStatus{}
	if issued != nil {
		st = *issued
	}
	st.Conditions = append(append([]metav1.Condition(nil), pcr.Status.Conditions...), metav1.Condition{
		Type:               condType,
		Status:             metav1.ConditionTrue,
		Reason:             reason,
		Message:            truncate1k(msg),
		LastTransitionTime: metav1.NewTime(s.clock.Now()),
	})
	// A merge patch of the status subresource that carries the resourceVersion the decision was made
	// on: kube-apiserver refuses it (409) if the request changed since.
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]string{"resourceVersion": pcr.ResourceVersion},
		"status":   st,
	})
	if err != nil {
		return fmt.Errorf("making the status patch of PodCertificateRequest %s/%s: %w", pcr.Namespace, pcr.Name, err)
	}
	_, err = s.kube.CertificatesV1().PodCertificateRequests(pcr.Namespace).Patch(ctx, pcr.Name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: certapiv1alpha1.FieldManager}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("writing %s into PodCertificateRequest %s/%s: %w", condType, pcr.Namespace, pcr.Name, err)
	}
	return nil
}

// event records an Event on the ServingCertRequest when there is one, else on the PodCertificateRequest;
// the other is the related object. Only names and public facts go into it.
func (s *Signer) event(in Input, eventType, reason, action, note string) {
	pcrRef := &certificatesv1.PodCertificateRequest{
		TypeMeta:   metav1.TypeMeta{APIVersion: certificatesv1.SchemeGroupVersion.String(), Kind: "PodCertificateRequest"},
		ObjectMeta: metav1.ObjectMeta{Namespace: in.PCR.Namespace, Name: in.PCR.Name, UID: in.PCR.UID},
	}
	var regarding, related runtime.Object = pcrRef, nil
	if r := in.Request; r != nil {
		regarding = &certapiv1alpha1.ServingCertRequest{
			TypeMeta:   metav1.TypeMeta{APIVersion: certapiv1alpha1.SchemeGroupVersion.String(), Kind: "ServingCertRequest"},
			ObjectMeta: metav1.ObjectMeta{Namespace: r.Namespace, Name: r.Name, UID: r.UID, ResourceVersion: r.ResourceVersion},
		}
		related = pcrRef
	}
	s.recorder.Eventf(regarding, related, eventType, reason, action, "%s", truncate1k(note))
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}

func truncate1k(s string) string {
	if len(s) <= maxNoteLength {
		return s
	}
	return s[:maxNoteLength-3] + "..."
}
