package servingcertrequest

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/certapi/certapi/pkg/apis/certapi"
	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/apis/certapi/validation"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/metrics"
	"github.com/certapi/certapi/pkg/signer"
)

// Issuer signs a request, on this replica or through the leader.
type Issuer interface {
	Issue(ctx context.Context, req issuer.Request) (*issuer.Result, error)
}

// RetryAfterSeconds is what a 503 from the servingcerts subresource asks clients to wait before retrying.
const RetryAfterSeconds = 1

// ServingCertsREST serves create on servingcertrequests/{name}/servingcerts: synchronous issuance for a
// caller that holds its own key. Nothing is stored per issuance; the parent's status is updated by the
// leader, coalesced, off this path.
type ServingCertsREST struct {
	requests rest.Getter
	issuer   Issuer
	timeout  time.Duration
	denied   func(namespace, name, message string)
	now      func() time.Time
}

var (
	_ rest.NamedCreater             = &ServingCertsREST{}
	_ rest.GroupVersionKindProvider = &ServingCertsREST{}
	_ rest.Storage                  = &ServingCertsREST{}
	_ rest.SingularNameProvider     = &ServingCertsREST{}
	_ rest.Scoper                   = &ServingCertsREST{}
)

// NewServingCertsREST returns the subresource storage; requests reads parents, iss signs, timeout bounds
// each call (reading the parent and signing, handoff included: past it the answer is 503 with
// Retry-After, never a hang, even while etcd is unreachable), and denied (if not nil) is told about
// each refused request so that it can be recorded as an Event on the parent.
func NewServingCertsREST(requests rest.Getter, iss Issuer, timeout time.Duration, denied func(namespace, name, message string)) *ServingCertsREST {
	if denied == nil {
		denied = func(string, string, string) {}
	}
	return &ServingCertsREST{requests: requests, issuer: iss, timeout: timeout, denied: denied, now: time.Now}
}

// New returns an empty ServingCert, the body this subresource takes.
func (r *ServingCertsREST) New() runtime.Object { return &certapi.ServingCert{} }

// Destroy has nothing to release.
func (r *ServingCertsREST) Destroy() {}

// NamespaceScoped is true: the parent is namespaced.
func (r *ServingCertsREST) NamespaceScoped() bool { return true }

// GetSingularName names the body kind in discovery.
func (r *ServingCertsREST) GetSingularName() string { return "servingcert" }

// GroupVersionKind says the subresource takes and returns ServingCert, not ServingCertRequest.
func (r *ServingCertsREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return certapiv1alpha1.SchemeGroupVersion.WithKind("ServingCert")
}

// Create validates the CSR against the parent request and signs it. Dry-run validates and does not sign.
func (r *ServingCertsREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	sc, ok := obj.(*certapi.ServingCert)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a ServingCert, got %T", obj))
	}
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	if sc.Name != "" && sc.Name != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("metadata.name %q does not match the ServingCertRequest %q in the URL", sc.Name, name))
	}

	// One deadline for the whole call: etcd may be unreachable for reading the parent as much as for
	// the handoff, and a caller must get an answer it can retry rather than wait for the request timeout.
	callCtx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	parentObj, err := r.requests.Get(callCtx, name, &metav1.GetOptions{})
	if err != nil {
		if callCtx.Err() != nil && ctx.Err() == nil {
			metrics.Issuances.WithLabelValues(issuer.PathServingCerts, "unavailable").Inc()
			return nil, unavailable(fmt.Errorf("reading ServingCertRequest %s/%s took longer than %s: %w", ns, name, r.timeout, err))
		}
		return nil, err // NotFound names servingcertrequests and the name
	}
	parent := parentObj.(*certapi.ServingCertRequest)
	if parent.DeletionTimestamp != nil {
		return nil, apierrors.NewConflict(certapi.Resource("servingcertrequests"), name, errors.New("the request is being deleted"))
	}

	pub, duration, errs := validateServingCert(sc, parent)
	if len(errs) > 0 {
		metrics.Issuances.WithLabelValues(issuer.PathServingCerts, "invalid").Inc()
		invalid := apierrors.NewInvalid(certapi.Kind("ServingCert"), name, errs)
		r.denied(ns, name, invalid.Error())
		return nil, invalid
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj); err != nil {
			return nil, err
		}
	}

	out := &certapi.ServingCert{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.NewTime(r.now())},
		Spec:       certapi.ServingCertSpec{CertificateRequest: sc.Spec.CertificateRequest, Duration: &metav1.Duration{Duration: duration}},
	}
	if len(options.DryRun) > 0 {
		return out, nil
	}

	start := r.now()
	req := requestOf(parent)
	req.Duration, req.PublicKeyPKIX = duration, pub
	res, err := r.issuer.Issue(callCtx, req)
	metrics.IssuanceDuration.WithLabelValues(issuer.PathServingCerts).Observe(time.Since(start).Seconds())
	if errors.Is(err, issuer.ErrNoLeader) || errors.Is(err, signer.ErrKeyUnavailable) {
		metrics.Issuances.WithLabelValues(issuer.PathServingCerts, "unavailable").Inc()
		return nil, unavailable(err)
	}
	if errors.Is(err, issuer.ErrHandoffRefused) {
		// The leader read the request again and it no longer allows what this replica read a moment ago
		// (changed or deleted meanwhile): the caller retries against what is stored now.
		metrics.Issuances.WithLabelValues(issuer.PathServingCerts, "conflict").Inc()
		return nil, apierrors.NewConflict(certapi.Resource("servingcertrequests"), name, err)
	}
	if err != nil {
		metrics.Issuances.WithLabelValues(issuer.PathServingCerts, "error").Inc()
		return nil, apierrors.NewInternalError(err)
	}
	metrics.Issuances.WithLabelValues(issuer.PathServingCerts, "issued").Inc()
	out.Status = certapi.ServingCertStatus{
		Certificate:  res.CertificatePEM,
		CABundle:     res.CABundle,
		SerialNumber: res.SerialNumber,
		NotBefore:    timePtr(res.NotBefore),
		NotAfter:     timePtr(res.NotAfter),
		RenewalTime:  timePtr(res.RenewalTime),
	}
	return out, nil
}

// requestOf returns what the servingcerts subresource asks the issuer to sign for parent, before the
// caller's key and lifetime are added: its identity (namespace, name, Service, DNS names), its duration as
// the longest allowed, and its renewBefore.
func requestOf(parent *certapi.ServingCertRequest) issuer.Request {
	var renewBefore time.Duration
	if parent.Spec.RenewBefore != nil {
		renewBefore = parent.Spec.RenewBefore.Duration
	}
	return issuer.Request{
		Namespace:   parent.Namespace,
		Name:        parent.Name,
		ServiceName: parent.Spec.ServiceName,
		DNSNames:    parent.Spec.DNSNames,
		Duration:    parent.Spec.Duration.Duration,
		RenewBefore: renewBefore,
		Path:        issuer.PathServingCerts,
	}
}

// HandoffCheck returns the leader's check of each request a follower hands it (issuer.HandoffCheck): it
// reads the ServingCertRequest from storage, not from what the handoff key says, and refuses a request
// that is gone, being deleted, or asks for more than it allows.
func HandoffCheck(requests rest.Getter) issuer.HandoffCheck {
	return func(ctx context.Context, req issuer.Request) error {
		obj, err := requests.Get(genericapirequest.WithNamespace(ctx, req.Namespace), req.Name, &metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: ServingCertRequest %s/%s does not exist", issuer.ErrHandoffRefused, req.Namespace, req.Name)
		}
		if err != nil {
			return fmt.Errorf("reading ServingCertRequest %s/%s: %w", req.Namespace, req.Name, err)
		}
		parent, ok := obj.(*certapi.ServingCertRequest)
		if !ok {
			return fmt.Errorf("reading ServingCertRequest %s/%s: got %T", req.Namespace, req.Name, obj)
		}
		if parent.DeletionTimestamp != nil {
			return fmt.Errorf("%w: ServingCertRequest %s/%s is being deleted", issuer.ErrHandoffRefused, req.Namespace, req.Name)
		}
		return req.AllowedBy(requestOf(parent))
	}
}

// validateServingCert checks the body against its parent and returns the CSR's public key (PKIX DER) and
// the lifetime to sign for.
func validateServingCert(sc *certapi.ServingCert, parent *certapi.ServingCertRequest) ([]byte, time.Duration, field.ErrorList) {
	var errs field.ErrorList
	specPath := field.NewPath("spec")
	parentDuration := parent.Spec.Duration.Duration
	duration := parentDuration
	if sc.Spec.Duration != nil {
		d := sc.Spec.Duration.Duration
		switch {
		case d < validation.MinDuration:
			errs = append(errs, field.Invalid(specPath.Child("duration"), d.String(), fmt.Sprintf("must be at least %s and at most the ServingCertRequest's duration (%s)", validation.MinDuration, parentDuration)))
		case d > parentDuration:
			errs = append(errs, field.Invalid(specPath.Child("duration"), d.String(), fmt.Sprintf("must be at most the ServingCertRequest's duration (%s); omit it to get that", parentDuration)))
		default:
			duration = d
		}
	}
	csrPath := specPath.Child("certificateRequest")
	if sc.Spec.CertificateRequest == "" {
		errs = append(errs, field.Required(csrPath, "a PEM-encoded PKCS#10 certificate request; accepted keys: "+signer.AcceptedKeys))
		return nil, 0, errs
	}
	csr, err := signer.ParseCSR([]byte(sc.Spec.CertificateRequest))
	if err != nil {
		// The signer's messages say what is wrong and what is accepted, and never echo the input.
		errs = append(errs, field.Invalid(csrPath, "<certificate request>", err.Error()))
		return nil, 0, errs
	}
	pub, err := x509.MarshalPKIXPublicKey(csr.PublicKey)
	if err != nil {
		errs = append(errs, field.Invalid(csrPath, "<certificate request>", "its public key cannot be encoded: "+err.Error()))
	}
	return pub, duration, errs
}

// unavailable is a 503 with Retry-After, which client-go retries (up to 10 times by default).
func unavailable(err error) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    503,
		Reason:  metav1.StatusReasonServiceUnavailable,
		Message: fmt.Sprintf("certapi cannot sign right now (%v); retry shortly", err),
		Details: &metav1.StatusDetails{RetryAfterSeconds: RetryAfterSeconds},
	}}
}

func timePtr(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}
