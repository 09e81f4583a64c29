package servingcerttest

import (
	"context"
	"crypto"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/watch"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

// CreateServingCert is the servingcerts subresource: it signs a certificate for the key of
// sc.spec.certificateRequest with the Active CA, for the names of the ServingCertRequest
// namespace/name, and answers as certapi does (certificate, caBundle, serial, notBefore, notAfter,
// renewalTime). A missing request is NotFound, a bad CSR or a duration longer than the request's is
// Invalid, and an error set with Fail is returned as it is.
func (c *CA) CreateServingCert(ctx context.Context, namespace, name string, sc *certapiv1alpha1.ServingCert) (*certapiv1alpha1.ServingCert, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	failure := c.failure
	spec, found := c.requests[types.NamespacedName{Namespace: namespace, Name: name}]
	active := c.active
	c.mu.Unlock()
	if failure != nil {
		return nil, failure
	}
	if !found {
		return nil, apierrors.NewNotFound(certapiv1alpha1.Resource("servingcertrequests"), name)
	}
	if sc == nil {
		return nil, apierrors.NewBadRequest("no ServingCert given")
	}
	specPath := field.NewPath("spec")
	csr, err := signer.ParseCSR([]byte(sc.Spec.CertificateRequest))
	if err != nil {
		return nil, invalid(name, field.Invalid(specPath.Child("certificateRequest"), "(PEM)", err.Error()))
	}
	duration := spec.Duration.Duration
	if d := sc.Spec.Duration; d != nil {
		if d.Duration <= 0 || d.Duration > duration {
			return nil, invalid(name, field.Invalid(specPath.Child("duration"), d.Duration.String(),
				fmt.Sprintf("want a positive duration of at most the ServingCertRequest's spec.duration, %s", duration)))
		}
		duration = d.Duration
	}
	now := c.clock.Now()
	leaf, err := active.Sign(c.leafRequest(namespace, spec, csr.PublicKey, duration))
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	var renewBefore *time.Duration
	if spec.RenewBefore != nil {
		renewBefore = &spec.RenewBefore.Duration
	}
	renewal := signer.RenewalTime(leaf.NotBefore, leaf.NotAfter, renewBefore, now)

	c.mu.Lock()
	c.issued = append(c.issued, leaf.Certificate)
	// The bundle of now: it holds the CA that signed even if a rotation ran meanwhile, since a CA
	// stays in the bundle as Retiring.
	bundle := signer.EncodeBundle(c.trustedLocked()...)
	c.mu.Unlock()
	return &certapiv1alpha1.ServingCert{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, CreationTimestamp: metav1.NewTime(now)},
		Spec:       certapiv1alpha1.ServingCertSpec{CertificateRequest: sc.Spec.CertificateRequest, Duration: &metav1.Duration{Duration: duration}},
		Status: certapiv1alpha1.ServingCertStatus{
			Certificate:  string(leaf.CertificatePEM),
			CABundle:     string(bundle),
			SerialNumber: leaf.SerialNumber,
			NotBefore:    &metav1.Time{Time: leaf.NotBefore},
			NotAfter:     &metav1.Time{Time: leaf.NotAfter},
			RenewalTime:  &metav1.Time{Time: renewal},
		},
	}, nil
}

func invalid(name string, err *field.Error) error {
	return apierrors.NewInvalid(certapiv1alpha1.SchemeGroupVersion.WithKind("ServingCert").GroupKind(), name, field.ErrorList{err})
}

// leafRequest is what certapi's signer is asked for a request of namespace with spec.
func (c *CA) leafRequest(namespace string, spec certapiv1alpha1.ServingCertRequestSpec, pub crypto.PublicKey, d time.Duration) signer.LeafRequest {
	return signer.LeafRequest{
		ServiceName: spec.ServiceName, Namespace: namespace, ClusterDomain: c.clusterDomain,
		DNSNames: spec.DNSNames, PublicKey: pub, Duration: d, Now: c.clock.Now(),
	}
}

// CreateServingCertRequest adds scr as AddRequest does (servingcert.Options.CreateIfMissing), and
// answers AlreadyExists, leaving it as it is, when a request of that name was added before.
func (c *CA) CreateServingCertRequest(ctx context.Context, scr *certapiv1alpha1.ServingCertRequest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if scr == nil {
		return apierrors.NewBadRequest("no ServingCertRequest given")
	}
	created, err := c.addRequest(scr, false)
	switch {
	case err != nil:
		return apierrors.NewBadRequest(err.Error())
	case !created:
		return apierrors.NewAlreadyExists(certapiv1alpha1.Resource("servingcertrequests"), scr.Name)
	}
	return nil
}

// WatchCertificateAuthority watches CertificateAuthority/default: its current state first (Added),
// then its state after each PublishNext, Rotate and DropRetiring (Modified). A slow reader misses no
// change of state, only states already replaced: the watch holds the latest one. opts are not read;
// the double has only this one object. The watch ends with Stop.
func (c *CA) WatchCertificateAuthority(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w := &caWatch{ca: c, ch: make(chan watch.Event, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	w.sendLocked(watch.Event{Type: watch.Added, Object: c.authorityLocked()})
	c.watchers[w] = struct{}{}
	return w, nil
}

// caWatch is one watch of the CertificateAuthority. Its one sender is the CA, under CA.mu, which Stop
// takes too, so a send never meets a closed channel.
type caWatch struct {
	ca   *CA
	ch   chan watch.Event
	once sync.Once
}

// sendLocked puts ev in the channel, replacing an event not read yet. Called with ca.mu held.
func (w *caWatch) sendLocked(ev watch.Event) {
	select {
	case w.ch <- ev:
		return
	default:
	}
	select {
	case <-w.ch:
	default:
	}
	w.ch <- ev
}

func (w *caWatch) ResultChan() <-chan watch.Event { return w.ch }

func (w *caWatch) Stop() {
	w.once.Do(func() {
		w.ca.mu.Lock()
		delete(w.ca.watchers, w)
		close(w.ch)
		w.ca.mu.Unlock()
	})
}
