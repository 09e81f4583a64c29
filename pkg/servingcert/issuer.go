package servingcert

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
)

// Issuer is the whole of what a Source asks of certapi: the three calls below, with the API's types and
// errors. By default (Options.Issuer nil) they go to kube-apiserver through the clientset of
// Options.Client or Options.RestConfig. A test sets Options.Issuer to an in-memory CA (package
// servingcerttest) so that the code under test gets certificates without a certapi server, while the
// Source's renewal, backoff, readiness and re-issue on a CA change run exactly as in production.
//
// Errors are the API's: an error for which apierrors.IsNotFound is true from CreateServingCert means the
// ServingCertRequest is missing (the Source then creates it when Options.CreateIfMissing is set), and
// apierrors.IsAlreadyExists from CreateServingCertRequest means it exists.
type Issuer interface {
	// CreateServingCert creates a ServingCert under the ServingCertRequest namespace/name (the
	// servingcerts subresource) and returns the answer: status.certificate for the key of
	// sc.spec.certificateRequest, status.caBundle and status.renewalTime.
	CreateServingCert(ctx context.Context, namespace, name string, sc *certapiv1alpha1.ServingCert) (*certapiv1alpha1.ServingCert, error)
	// CreateServingCertRequest creates scr (only for Options.CreateIfMissing).
	CreateServingCertRequest(ctx context.Context, scr *certapiv1alpha1.ServingCertRequest) error
	// WatchCertificateAuthority watches CertificateAuthority/default with opts (a field selector on its
	// name): first its current state, then each change. The Source retries a watch that ends or fails.
	WatchCertificateAuthority(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// clientIssuer is the default Issuer: certapi's API through a clientset.
type clientIssuer struct{ client versioned.Interface }

func (c clientIssuer) CreateServingCert(ctx context.Context, namespace, name string, sc *certapiv1alpha1.ServingCert) (*certapiv1alpha1.ServingCert, error) {
	return c.client.CertapiV1alpha1().ServingCertRequests(namespace).CreateServingCert(ctx, name, sc, metav1.CreateOptions{})
}

func (c clientIssuer) CreateServingCertRequest(ctx context.Context, scr *certapiv1alpha1.ServingCertRequest) error {
	_, err := c.client.CertapiV1alpha1().ServingCertRequests(scr.Namespace).Create(ctx, scr, metav1.CreateOptions{FieldManager: "servingcert"})
	return err
}

func (c clientIssuer) WatchCertificateAuthority(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return c.client.CertapiV1alpha1().CertificateAuthorities().Watch(ctx, opts)
}

// caWatcher gives an Issuer's watch the shape cawatch.Follow takes.
type caWatcher struct{ issuer Issuer }

func (w caWatcher) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return w.issuer.WatchCertificateAuthority(ctx, opts)
}
