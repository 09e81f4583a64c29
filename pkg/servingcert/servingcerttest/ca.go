package servingcerttest

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/clock"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/servingcert"
	"github.com/certapi/certapi/pkg/signer"
)

// DefaultClusterDomain is the cluster domain of Options when none is given, kube-apiserver's and
// certapi's default.
const DefaultClusterDomain = "cluster.local"

// Options configures a CA. The zero value is a CA for cluster.local on the real clock.
type Options struct {
	// ClusterDomain is the cluster's DNS domain: every certificate names <service>.<namespace>.svc and
	// <service>.<namespace>.svc.<ClusterDomain>, and the CA permits only names under those. Default
	// DefaultClusterDomain.
	ClusterDomain string
	// CADuration is the lifetime of each CA certificate; default signer.DefaultCADuration (a year). A
	// leaf never outlives its CA.
	CADuration time.Duration
	// Clock gives the time certificates are issued at. Default the real clock; give the same fake
	// clock to the CA and to servingcert.Options.Clock to test renewal without waiting.
	Clock clock.PassiveClock
}

// CA is an in-memory certapi: a CertificateAuthority with its rotation, and the ServingCertRequests a
// test adds. It implements servingcert.Issuer: give it to servingcert.Options.Issuer. Every method is
// safe for concurrent use. It starts no goroutine and needs no Close.
type CA struct {
	clusterDomain string
	caDuration    time.Duration
	clock         clock.PassiveClock

	mu       sync.Mutex
	active   *signer.CA
	next     *signer.CA   // published, not yet signing (PublishNext)
	retiring []*signer.CA // trusted, no longer signing, newest first (Rotate)
	requests map[types.NamespacedName]certapiv1alpha1.ServingCertRequestSpec
	failure  error
	issued   []*x509.Certificate
	version  int64 // the CertificateAuthority's resourceVersion, one more at every change
	made     int   // CAs made so far
	watchers map[*caWatch]struct{}
}

var _ servingcert.Issuer = (*CA)(nil)

// NewCA makes a CA with a new key: certapi's first CertificateAuthority.
func NewCA(o Options) (*CA, error) {
	c := &CA{
		clusterDomain: o.ClusterDomain,
		caDuration:    o.CADuration,
		clock:         o.Clock,
		requests:      map[types.NamespacedName]certapiv1alpha1.ServingCertRequestSpec{},
		watchers:      map[*caWatch]struct{}{},
	}
	if c.clusterDomain == "" {
		c.clusterDomain = DefaultClusterDomain
	}
	if c.caDuration == 0 {
		c.caDuration = signer.DefaultCADuration
	}
	if c.clock == nil {
		c.clock = clock.RealClock{}
	}
	active, err := c.newSigner()
	if err != nil {
		return nil, err
	}
	c.active = active
	c.version = 1
	return c, nil
}

// newSigner makes a CA; called with mu held, or before the CA is shared.
func (c *CA) newSigner() (*signer.CA, error) {
	c.made++
	now := c.clock.Now()
	// Named as certapi names its CAs, with a count: two CAs made in one second stay apart.
	cn := fmt.Sprintf("%s%d-%d", signer.CACommonNamePrefix, now.Unix(), c.made)
	ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: c.clusterDomain, Duration: c.caDuration, Now: now, CommonName: cn})
	if err != nil {
		return nil, fmt.Errorf("servingcerttest: %w", err)
	}
	return ca, nil
}

// AddRequest adds (or replaces) a ServingCertRequest, as the operator's manifests would ship it: the
// Source named scr's namespace and name gets certificates for spec.serviceName and spec.dnsNames.
// spec.duration defaults to 168h as in certapi. It refuses what certapi refuses for names and
// durations, except that any positive duration is accepted.
func (c *CA) AddRequest(scr *certapiv1alpha1.ServingCertRequest) error {
	_, err := c.addRequest(scr, true)
	return err
}

// addRequest checks scr and stores it; an existing request of that name is replaced only when
// replace is set. It reports whether scr was stored.
func (c *CA) addRequest(scr *certapiv1alpha1.ServingCertRequest, replace bool) (bool, error) {
	spec, err := checkRequest(scr)
	if err != nil {
		return false, err
	}
	// The names as certapi's signer checks them (each in the request's namespace, or the wildcard of
	// its Service, and permitted by the CA), by signing once for a throwaway key.
	key, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		return false, fmt.Errorf("servingcerttest: %w", err)
	}
	c.mu.Lock()
	active := c.active
	c.mu.Unlock()
	if _, err := active.Sign(c.leafRequest(scr.Namespace, spec, key.Public(), time.Hour)); err != nil {
		return false, fmt.Errorf("servingcerttest: ServingCertRequest %s/%s: %w", scr.Namespace, scr.Name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := types.NamespacedName{Namespace: scr.Namespace, Name: scr.Name}
	if _, exists := c.requests[k]; exists && !replace {
		return false, nil
	}
	c.requests[k] = spec
	return true, nil
}

// checkRequest validates scr as far as the double needs, and returns its spec with duration defaulted.
func checkRequest(scr *certapiv1alpha1.ServingCertRequest) (certapiv1alpha1.ServingCertRequestSpec, error) {
	if scr == nil {
		return certapiv1alpha1.ServingCertRequestSpec{}, errors.New("servingcerttest: no ServingCertRequest given")
	}
	spec := *scr.Spec.DeepCopy()
	var problems []string
	for _, f := range []struct{ what, value string }{
		{"metadata.namespace", scr.Namespace}, {"metadata.name", scr.Name}, {"spec.serviceName", spec.ServiceName},
	} {
		if f.value == "" {
			problems = append(problems, f.what+" is required")
			continue
		}
		if errs := validation.IsDNS1123Label(f.value); f.what != "metadata.name" && len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("%s %q: %v", f.what, f.value, errs))
		}
	}
	if spec.ServiceName != "" {
		if errs := validation.IsDNS1035Label(spec.ServiceName); len(errs) > 0 {
			problems = append(problems, fmt.Sprintf("spec.serviceName %q: %v", spec.ServiceName, errs))
		}
	}
	if spec.Duration == nil {
		spec.Duration = &metav1.Duration{Duration: certapiv1alpha1.DefaultDuration}
	}
	if spec.Duration.Duration <= 0 {
		problems = append(problems, fmt.Sprintf("spec.duration %s: want a positive duration", spec.Duration.Duration))
	}
	if rb := spec.RenewBefore; rb != nil && (rb.Duration <= 0 || rb.Duration >= spec.Duration.Duration) {
		problems = append(problems, fmt.Sprintf("spec.renewBefore %s: want a positive duration less than spec.duration (%s)", rb.Duration, spec.Duration.Duration))
	}
	if len(problems) > 0 {
		return spec, fmt.Errorf("servingcerttest: ServingCertRequest %s/%s: %v", scr.Namespace, scr.Name, problems)
	}
	return spec, nil
}

// CABundle returns the PEM bundle clients must trust now: the Active CA, then a Next CA, then the
// Retiring ones, as certapi orders them. Put it in a webhook configuration's caBundle (certapi's
// injector would), or in a test client's RootCAs.
func (c *CA) CABundle() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return signer.EncodeBundle(c.trustedLocked()...)
}

// Active returns the certificate of the CA that signs now.
func (c *CA) Active() *x509.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.active.Certificate
}

// PublishNext makes the next CA and adds it to the bundle without signing with it yet: certapi's first
// step of a rotation, when every client is given the new CA before any certificate from it is served.
// A Next CA already published is kept. Sources see the new bundle in CABundle at once.
func (c *CA) PublishNext() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.next != nil {
		return nil
	}
	next, err := c.newSigner()
	if err != nil {
		return err
	}
	c.next = next
	c.changedLocked()
	return nil
}

// Rotate makes the Next CA (one made now when PublishNext was not called) the Active one, which signs
// every certificate from now on; the previous Active CA stays in the bundle as Retiring, so that the
// certificates it signed keep verifying. Sources with the CA watch (the default) re-issue within
// servingcert.Options.CAChangeDelay.
func (c *CA) Rotate() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	next := c.next
	if next == nil {
		var err error
		if next, err = c.newSigner(); err != nil {
			return err
		}
	}
	c.retiring = append([]*signer.CA{c.active.WithoutKey()}, c.retiring...)
	c.active, c.next = next, nil
	c.changedLocked()
	return nil
}

// DropRetiring removes every Retiring CA from the bundle: certapi's last step of a rotation, once no
// certificate they signed can still be valid. A client still served a certificate of one then fails to
// verify it, as it would in a cluster.
func (c *CA) DropRetiring() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.retiring) == 0 {
		return
	}
	c.retiring = nil
	c.changedLocked()
}

// Fail makes every issuance fail with err (an API error such as apierrors.NewServiceUnavailable reads
// as certapi's would) until Fail(nil).
func (c *CA) Fail(err error) {
	c.mu.Lock()
	c.failure = err
	c.mu.Unlock()
}

// Issued returns every certificate issued so far, oldest first.
func (c *CA) Issued() []*x509.Certificate {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*x509.Certificate(nil), c.issued...)
}

// trustedLocked is the bundle's certificates in certapi's order: Active, Next, Retiring.
func (c *CA) trustedLocked() []*x509.Certificate {
	certs := []*x509.Certificate{c.active.Certificate}
	if c.next != nil {
		certs = append(certs, c.next.Certificate)
	}
	for _, r := range c.retiring {
		certs = append(certs, r.Certificate)
	}
	return certs
}

// authorityLocked is CertificateAuthority/default as certapi would show it now.
func (c *CA) authorityLocked() *certapiv1alpha1.CertificateAuthority {
	ref := func(ca *signer.CA) certapiv1alpha1.CertificateAuthorityRef {
		return certapiv1alpha1.CertificateAuthorityRef{
			SerialNumber: signer.FormatSerialNumber(ca.Certificate.SerialNumber),
			SubjectKeyID: ca.SubjectKeyID(),
		}
	}
	entry := func(ca *signer.CA, role certapiv1alpha1.CertificateAuthorityRole) certapiv1alpha1.CertificateAuthorityCertificate {
		return certapiv1alpha1.CertificateAuthorityCertificate{
			CertificateAuthorityRef: ref(ca), Role: role,
			NotBefore: metav1.NewTime(ca.Certificate.NotBefore), NotAfter: metav1.NewTime(ca.Certificate.NotAfter),
		}
	}
	active := ref(c.active)
	certs := []certapiv1alpha1.CertificateAuthorityCertificate{entry(c.active, certapiv1alpha1.CARoleActive)}
	reason, message := certapiv1alpha1.RotatingReasonIdle, "no rotation is running"
	if c.next != nil {
		certs = append(certs, entry(c.next, certapiv1alpha1.CARoleNext))
		reason, message = certapiv1alpha1.RotatingReasonNextPublished, "the Next CA is in the bundle"
	}
	for _, r := range c.retiring {
		certs = append(certs, entry(r, certapiv1alpha1.CARoleRetiring))
	}
	if len(c.retiring) > 0 && c.next == nil {
		reason, message = certapiv1alpha1.RotatingReasonRetiring, "a Retiring CA is still in the bundle"
	}
	rotating := metav1.ConditionFalse
	if reason != certapiv1alpha1.RotatingReasonIdle {
		rotating = metav1.ConditionTrue
	}
	now := metav1.NewTime(c.clock.Now())
	return &certapiv1alpha1.CertificateAuthority{
		TypeMeta: metav1.TypeMeta{APIVersion: certapiv1alpha1.SchemeGroupVersion.String(), Kind: "CertificateAuthority"},
		ObjectMeta: metav1.ObjectMeta{
			Name: certapiv1alpha1.CertificateAuthorityName, Generation: 1, ResourceVersion: strconv.FormatInt(c.version, 10),
		},
		Status: certapiv1alpha1.CertificateAuthorityStatus{
			ObservedGeneration: 1,
			CABundle:           string(signer.EncodeBundle(c.trustedLocked()...)),
			Active:             &active,
			Certificates:       certs,
			Conditions: []metav1.Condition{
				{Type: certapiv1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Signing", Message: "the Active CA signs", LastTransitionTime: now, ObservedGeneration: 1},
				{Type: certapiv1alpha1.ConditionRotating, Status: rotating, Reason: reason, Message: message, LastTransitionTime: now, ObservedGeneration: 1},
			},
		},
	}
}

// changedLocked records a change of the CertificateAuthority and tells every watch.
func (c *CA) changedLocked() {
	c.version++
	ca := c.authorityLocked()
	for w := range c.watchers {
		w.sendLocked(watch.Event{Type: watch.Modified, Object: ca.DeepCopy()})
	}
}

// WaitServing waits until src serves a certificate signed by the Active CA (after Rotate, until src has
// re-issued), checking every 10 ms, or until ctx ends.
func (c *CA) WaitServing(ctx context.Context, src *servingcert.Source) error {
	return wait.PollUntilContextCancel(ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
		cert, err := src.GetCertificate(nil)
		return err == nil && cert.Leaf != nil && cert.Leaf.CheckSignatureFrom(c.Active()) == nil, nil
	})
}
