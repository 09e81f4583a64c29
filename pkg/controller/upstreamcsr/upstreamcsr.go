// Package upstreamcsr is the leader's controller that carries certapi's CA certificate requests to an
// organisation's CA through the Kubernetes certificates.k8s.io/v1 CertificateSigningRequest API
// (--ca-upstream=CertificateSigningRequest): for the request that waits for a signature it makes a
// CertificateSigningRequest for the configured signerName, and when the signer has issued the certificate
// it imports it as the Next CA, with the same checks as an import by hand (issuer.Import). It never
// approves: approval is the organisation's decision (a person, or an approver it runs), and certapi's
// RBAC grants no approve. A denied or failed request, or a certificate the import refused, is reported
// (an Event on CertificateAuthority/default and the log) and waits for the operator, who deletes the
// CertificateSigningRequest for certapi to ask again.
package upstreamcsr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certificateslisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	certapilisters "github.com/certapi/certapi/pkg/generated/listers/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer"
)

// ReportingController is the reportingController of this controller's Events.
const ReportingController = "certapi.dev/upstream-csr"

// MinExpiration is the shortest expirationSeconds the certificates.k8s.io API accepts (ten minutes).
const MinExpiration = 10 * time.Minute

// Authority is what the controller needs of the issuer (*issuer.Issuer is one).
type Authority interface {
	// State returns the leader's CAs, the pending request among them; ok is false off the leader.
	State() (signer.Authorities, bool)
	// AddListener tells lis when the CAs change (a request made or imported).
	AddListener(lis dynamiccertificates.Listener) (remove func())
	// Import checks a signed CA certificate for the pending request and stores it as the Next CA.
	Import(ctx context.Context, req issuer.ImportRequest) (*issuer.ImportResult, error)
}

// Options configure New.
type Options struct {
	// Context is the leadership term's. Required.
	Context *controller.Context
	// Authority is the issuer. Required.
	Authority Authority
	// SignerName is the signerName of every CertificateSigningRequest certapi makes. Required.
	SignerName string
	// Expiration, when positive, asks the signer for certificates valid that long (expirationSeconds,
	// at least MinExpiration); the signer may give less. Zero leaves it to the signer.
	Expiration time.Duration
}

// Controller makes the CertificateSigningRequest of each pending CA certificate request and imports what
// its signer issues. Make one per leadership term with New; the term runs it.
type Controller struct {
	o        Options
	kube     kubernetes.Interface
	csrs     certificateslisters.CertificateSigningRequestLister
	cas      certapilisters.CertificateAuthorityLister
	recorder events.EventRecorder
	queue    *controller.Queue[string]

	mu sync.Mutex
	// refused maps a CertificateSigningRequest's name to the resourceVersion whose certificate the
	// import refused (decide does not import it again); reported is the last detail logged and reported.
	refused  map[string]string
	reported string
}

// queueKey is the controller's one key: every change leads to the same sync of the whole state.
const queueKey = "ca-request"

// New checks o and declares on the term's Context the informer of the CertificateSigningRequests labelled
// certapi.dev/ca-request (a factory of its own: certapi never watches the cluster's other ones), the
// CertificateAuthority informer (its Events' object, and status.pendingRequest's changes), and the issuer
// as a Notifier.
func New(o Options) (*Controller, error) {
	switch {
	case o.Context == nil:
		return nil, errors.New("upstreamcsr: Options.Context is required")
	case o.Authority == nil:
		return nil, errors.New("upstreamcsr: Options.Authority is required")
	case o.SignerName == "":
		return nil, errors.New("upstreamcsr: Options.SignerName is required")
	case o.Expiration != 0 && o.Expiration < MinExpiration:
		return nil, fmt.Errorf("upstreamcsr: Options.Expiration %s is shorter than the API's least, %s", o.Expiration, MinExpiration)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(o.Context.Kube, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.LabelSelector = certapiv1alpha1.LabelCARequest + "=true"
	}))
	csrInformer := factory.Certificates().V1().CertificateSigningRequests()
	caInformer := o.Context.CertapiInformers.Certapi().V1alpha1().CertificateAuthorities()
	c := &Controller{
		o:        o,
		kube:     o.Context.Kube,
		csrs:     csrInformer.Lister(),
		cas:      caInformer.Lister(),
		recorder: o.Context.Recorder(ReportingController),
		refused:  map[string]string{},
	}
	c.queue = controller.NewQueue(controller.QueueOptions[string]{
		Name: "upstreamcsr", Workers: 1, Sync: c.sync,
		BackoffBase: time.Second, BackoffMax: time.Minute,
		Quiet: apierrors.IsConflict,
	})
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.enqueue() },
		UpdateFunc: func(any, any) { c.enqueue() },
		DeleteFunc: func(any) { c.enqueue() },
	}
	o.Context.AddFactory(factory)
	o.Context.Watch(csrInformer.Informer(), handler)
	// The CertificateAuthority's status changes with every request made or imported (status.pendingRequest),
	// whether or not the issuer's listeners hear of it (they are told of leadership and bundle changes).
	o.Context.Watch(caInformer.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: func(any) { c.enqueue() }, UpdateFunc: func(any, any) { c.enqueue() }})
	o.Context.Listen(o.Authority, c.enqueue)
	return c, nil
}

func (c *Controller) enqueue() { c.queue.Add(queueKey) }

// Run syncs until ctx ends: the term calls it once every cache has synced.
func (c *Controller) Run(ctx context.Context) error {
	c.enqueue()
	return c.queue.Run(ctx)
}

// ShutDown stops the queue of a Controller whose term ended before it ran.
func (c *Controller) ShutDown() { c.queue.ShutDown() }

func (c *Controller) sync(ctx context.Context, _ string) (controller.Result, error) {
	auth, ok := c.o.Authority.State()
	if !ok {
		return controller.Result{}, nil
	}
	var pending *pendingView
	if p := auth.Pending; p != nil {
		pending = &pendingView{name: p.Name(), request: p.RequestPEM}
	}
	list, err := c.csrs.List(labels.Everything())
	if err != nil {
		return controller.Result{}, fmt.Errorf("listing the CertificateSigningRequests certapi made: %w", err)
	}
	views := make([]csrView, 0, len(list))
	for _, csr := range list {
		views = append(views, viewOf(csr))
	}
	c.mu.Lock()
	d := decide(pending, c.o.SignerName, views, c.refused)
	c.mu.Unlock()

	logger := klog.FromContext(ctx)
	var errs []error
	for _, name := range d.remove {
		err := c.kube.CertificatesV1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting CertificateSigningRequest %s: %w", name, err))
			continue
		}
		logger.Info("Deleted a CertificateSigningRequest certapi made for a CA certificate request that no longer waits, or for another signer", "name", name)
	}
	if d.create {
		if err := c.create(ctx, auth.Pending); err != nil {
			errs = append(errs, err)
		}
	}
	if d.importFrom != "" {
		if err := c.importFrom(ctx, d.importFrom, list); err != nil {
			errs = append(errs, err)
		}
	}
	c.report(ctx, d)
	return controller.Result{}, errors.Join(errs...)
}

// create makes the CertificateSigningRequest for p. One of that name that certapi did not make (no
// label) is an error that names it: certapi never takes over or deletes another's request.
func (c *Controller) create(ctx context.Context, p *signer.PendingCA) error {
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:        p.Name(),
			Labels:      map[string]string{certapiv1alpha1.LabelCARequest: "true"},
			Annotations: map[string]string{certapiv1alpha1.AnnotationCertManagerRequestIsCA: "true"},
		},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    p.RequestPEM,
			SignerName: c.o.SignerName,
			// What the request's extensions ask for, in the API's words, for signers that take the usages
			// from the spec (cert-manager's do).
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageCertSign, certificatesv1.UsageCRLSign, certificatesv1.UsageServerAuth},
		},
	}
	if c.o.Expiration > 0 {
		s := int32(c.o.Expiration / time.Second)
		csr.Spec.ExpirationSeconds = &s
	}
	_, err := c.kube.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{FieldManager: certapiv1alpha1.FieldManager})
	if apierrors.IsAlreadyExists(err) {
		existing, gerr := c.kube.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if gerr == nil && existing.Labels[certapiv1alpha1.LabelCARequest] != "true" {
			err = fmt.Errorf("a CertificateSigningRequest named %s exists that certapi did not make (it lacks the label %s=true); "+
				"certapi asks for its CA certificate under that name: delete it", csr.Name, certapiv1alpha1.LabelCARequest)
			c.event(corev1.EventTypeWarning, "CertificateSigningRequestTaken", "%s", err.Error())
			return err
		}
		return nil // certapi's own, made a moment ago: the informer brings it
	}
	if err != nil {
		return fmt.Errorf("creating CertificateSigningRequest %s for signer %s: %w", csr.Name, c.o.SignerName, err)
	}
	c.event(corev1.EventTypeNormal, "CertificateSigningRequestCreated",
		"made CertificateSigningRequest %s for signer %s: the CA certificate request waits for its approval (kubectl certificate approve %s), then for the signer",
		csr.Name, c.o.SignerName, csr.Name)
	return nil
}

// importFrom imports the certificate in the status of the CertificateSigningRequest name. A refusal is
// recorded (not tried again for that resourceVersion) and reported; no pending request any more is no
// error (the state moved on); anything else is retried.
func (c *Controller) importFrom(ctx context.Context, name string, list []*certificatesv1.CertificateSigningRequest) error {
	var csr *certificatesv1.CertificateSigningRequest
	for _, x := range list {
		if x.Name == name {
			csr = x
		}
	}
	if csr == nil {
		return nil
	}
	res, err := c.o.Authority.Import(ctx, issuer.ImportRequest{CertificatePEM: string(csr.Status.Certificate)})
	var refused *signer.IntermediateError
	switch {
	case errors.As(err, &refused):
		c.mu.Lock()
		c.refused[name] = csr.ResourceVersion
		c.mu.Unlock()
		klog.FromContext(ctx).Info("WARNING: the CA certificate a signer issued through a CertificateSigningRequest was refused", "name", name, "signerName", c.o.SignerName, "err", err)
		c.event(corev1.EventTypeWarning, "CAImportRefused", "the certificate signer %s issued for CertificateSigningRequest %s was refused: %v", c.o.SignerName, name, err)
		return nil
	case errors.Is(err, signer.ErrNoPendingRequest):
		return nil
	case err != nil:
		return fmt.Errorf("importing the certificate of CertificateSigningRequest %s: %w", name, err)
	}
	klog.FromContext(ctx).Info("Imported the CA certificate a signer issued through a CertificateSigningRequest; it is the Next CA",
		"name", name, "signerName", c.o.SignerName, "serialNumber", res.SerialNumber, "notAfter", res.NotAfter, "chainNotAfter", res.ChainNotAfter, "root", res.Root)
	c.event(corev1.EventTypeNormal, "CAImported", "imported the CA certificate %s signer %s issued for CertificateSigningRequest %s (chain to %s, valid until %s) as the Next CA",
		res.SerialNumber, c.o.SignerName, name, res.Root, res.ChainNotAfter.UTC().Format(time.RFC3339))
	for _, w := range res.Warnings {
		c.event(corev1.EventTypeWarning, "CAImportWarning", "CertificateSigningRequest %s: %s", name, w.String())
	}
	return nil
}

// report logs the pending request's state when it changes, and makes an Event of a denial or failure.
func (c *Controller) report(ctx context.Context, d decision) {
	c.mu.Lock()
	changed := d.detail != c.reported
	c.reported = d.detail
	c.mu.Unlock()
	if !changed || d.detail == "" {
		return
	}
	klog.FromContext(ctx).Info("The CA certificate request's CertificateSigningRequest", "state", d.state, "detail", d.detail)
	switch d.state {
	case stateDenied:
		c.event(corev1.EventTypeWarning, "CertificateSigningRequestDenied", "%s", d.detail)
	case stateFailed:
		c.event(corev1.EventTypeWarning, "CertificateSigningRequestFailed", "%s", d.detail)
	}
}

// event records an Event on CertificateAuthority/default, when the informer has it.
func (c *Controller) event(eventType, reason, format string, args ...any) {
	obj, err := c.cas.Get(certapiv1alpha1.CertificateAuthorityName)
	if err != nil {
		return
	}
	c.recorder.Eventf(controller.RegardingCA(obj), nil, eventType, reason, "UpstreamCertificateSigningRequest", format, args...)
}

// viewOf is what decide reads of csr.
func viewOf(csr *certificatesv1.CertificateSigningRequest) csrView {
	v := csrView{
		name: csr.Name, resourceVersion: csr.ResourceVersion, request: csr.Spec.Request, signerName: csr.Spec.SignerName,
		certificate: csr.Status.Certificate, deleting: csr.DeletionTimestamp != nil,
	}
	for _, cond := range csr.Status.Conditions {
		if cond.Status != corev1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case certificatesv1.CertificateApproved:
			v.approved = true
		case certificatesv1.CertificateDenied:
			v.denied, v.reason, v.message = true, cond.Reason, cond.Message
		case certificatesv1.CertificateFailed:
			v.failed, v.reason, v.message = true, cond.Reason, cond.Message
		}
	}
	return v
}
