package certificateauthority

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"

	"github.com/certapi/certapi/pkg/apis/certapi"
	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer"
)

// Importer imports a signed CA certificate for the pending request: *issuer.Issuer.
type Importer interface {
	Import(ctx context.Context, req issuer.ImportRequest) (*issuer.ImportResult, error)
}

// ImportRetryAfterSeconds is what a 503 from the import subresource asks clients to wait.
const ImportRetryAfterSeconds = 1

// ImportREST serves create on certificateauthorities/default/import: the CA certificate an
// organisation's CA signed for status.pendingRequest comes back through it, like a TokenRequest: a
// create that stores nothing of its own and answers with what was done. RBAC: create on
// certificateauthorities/import, a verb and subresource of its own, so that who may import a CA (and so
// decide what every client in the cluster trusts) is granted apart from who may read or rotate it.
type ImportREST struct {
	importer Importer
	timeout  time.Duration
	// imported, when set, is told about each import that was stored, for an Event.
	imported func(res *issuer.ImportResult)
}

var (
	_ rest.NamedCreater             = &ImportREST{}
	_ rest.GroupVersionKindProvider = &ImportREST{}
	_ rest.SingularNameProvider     = &ImportREST{}
	_ rest.Scoper                   = &ImportREST{}
)

// NewImportREST returns the import subresource; timeout bounds each call (the leader may be another
// replica: past it the answer is 503 with Retry-After).
func NewImportREST(importer Importer, timeout time.Duration, imported func(res *issuer.ImportResult)) *ImportREST {
	return &ImportREST{importer: importer, timeout: timeout, imported: imported}
}

// New returns an empty CertificateAuthorityImport, the body this subresource takes.
func (r *ImportREST) New() runtime.Object { return &certapi.CertificateAuthorityImport{} }

// Destroy has nothing to release.
func (r *ImportREST) Destroy() {}

// NamespaceScoped is false: the CA is cluster-scoped.
func (r *ImportREST) NamespaceScoped() bool { return false }

// GetSingularName names the body kind in discovery.
func (r *ImportREST) GetSingularName() string { return "certificateauthorityimport" }

// GroupVersionKind says the subresource takes and returns CertificateAuthorityImport.
func (r *ImportREST) GroupVersionKind(schema.GroupVersion) schema.GroupVersionKind {
	return certapiv1alpha1.SchemeGroupVersion.WithKind("CertificateAuthorityImport")
}

// maxImportPEM bounds each PEM field before anything parses it.
const maxImportPEM = signer.MaxImportBytes

// Create checks the certificate against the pending key and stores it as the Next CA; dry-run checks
// and stores nothing. A refusal is a 422 whose causes are every problem found, each with its reason as
// the cause type.
func (r *ImportREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	in, ok := obj.(*certapi.CertificateAuthorityImport)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("expected a CertificateAuthorityImport, got %T", obj))
	}
	if name != certapiv1alpha1.CertificateAuthorityName {
		return nil, apierrors.NewNotFound(certapi.Resource("certificateauthorities"), name)
	}
	if in.Name != "" && in.Name != name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("metadata.name %q does not match the CertificateAuthority %q in the URL", in.Name, name))
	}
	if strings.TrimSpace(in.Spec.Certificate) == "" {
		return nil, invalid(name, []signer.Finding{{Reason: signer.ReasonMalformed, Message: "spec.certificate is empty; expected the PEM certificate the organisation's CA signed for status.pendingRequest"}}, "spec.certificate")
	}
	for field, v := range map[string]string{"spec.certificate": in.Spec.Certificate, "spec.chain": in.Spec.Chain} {
		if len(v) > maxImportPEM {
			return nil, invalid(name, []signer.Finding{{Reason: signer.ReasonMalformed, Message: fmt.Sprintf("%s holds %d bytes; accepted: at most %d", field, len(v), maxImportPEM)}}, field)
		}
	}
	if createValidation != nil {
		if err := createValidation(ctx, obj); err != nil {
			return nil, err
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	dryRun := len(options.DryRun) > 0
	res, err := r.importer.Import(callCtx, issuer.ImportRequest{CertificatePEM: in.Spec.Certificate, ChainPEM: in.Spec.Chain, DryRun: dryRun})
	var refused *signer.IntermediateError
	switch {
	case errors.As(err, &refused):
		for _, w := range refused.Warnings {
			warning.AddWarning(ctx, "", w.String())
		}
		return nil, invalid(name, refused.Problems, "spec.certificate")
	case errors.Is(err, issuer.ErrUpstreamOff), errors.Is(err, signer.ErrNoPendingRequest):
		return nil, apierrors.NewConflict(certapi.Resource("certificateauthorities"), name, err)
	case errors.Is(err, issuer.ErrNoLeader):
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: 503, Reason: metav1.StatusReasonServiceUnavailable,
			Message: fmt.Sprintf("certapi cannot import right now (%v); retry shortly", err),
			Details: &metav1.StatusDetails{RetryAfterSeconds: ImportRetryAfterSeconds},
		}}
	case err != nil:
		return nil, apierrors.NewInternalError(err)
	}
	out := &certapi.CertificateAuthorityImport{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Now()},
		Spec:       in.Spec,
		Status: certapi.CertificateAuthorityImportStatus{
			Role: certapi.CertificateAuthorityRole(res.Role), SerialNumber: res.SerialNumber, SubjectKeyID: res.SubjectKeyID,
			NotBefore: timePtr(res.NotBefore), NotAfter: timePtr(res.NotAfter), ChainNotAfter: timePtr(res.ChainNotAfter), Root: res.Root,
		},
	}
	for _, w := range res.Warnings {
		out.Status.Warnings = append(out.Status.Warnings, w.String())
		warning.AddWarning(ctx, "", w.String())
	}
	if !dryRun && r.imported != nil {
		r.imported(res)
	}
	return out, nil
}

// invalid is the 422 of a refused import: every finding is a cause, with its reason as the cause type.
func invalid(name string, problems []signer.Finding, field string) error {
	causes := make([]metav1.StatusCause, 0, len(problems))
	msgs := make([]string, 0, len(problems))
	for _, p := range problems {
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseType(p.Reason), Message: p.Message, Field: field})
		msgs = append(msgs, p.String())
	}
	msg := fmt.Sprintf("CertificateAuthorityImport %q is invalid: %s", name, (&signer.IntermediateError{Problems: problems}).Error())
	if len(msgs) == 0 {
		msg = fmt.Sprintf("CertificateAuthorityImport %q is invalid", name)
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid, Message: msg,
		Details: &metav1.StatusDetails{Group: certapi.GroupName, Kind: "CertificateAuthorityImport", Name: name, Causes: causes},
	}}
}

func timePtr(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}
