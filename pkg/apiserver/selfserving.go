package apiserver

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/tools/cache"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/generated/informers/externalversions"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer"
)

// selfServing is certapi's own serving certificate, issued by its own CA (through the leader, like any
// caller) and swapped in without a restart through the generic server's dynamic certificate machinery.
// Until the first one arrives it serves a self-signed placeholder: an empty provider would fail every
// handshake, and /readyz says why the replica is not ready instead.
type selfServing struct {
	service, namespace string

	mu        sync.RWMutex
	certPEM   []byte
	keyPEM    []byte
	issuedBy  string // serial of the CA that signed the current certificate; "" for the placeholder
	renewAt   time.Time
	listeners []dynamiccertificates.Listener

	// caSeen: this replica's watch has seen CertificateAuthority/default, the object every admin command
	// (rotate, distrust, status) starts from.
	caSeen atomic.Bool
}

var _ dynamiccertificates.CertKeyContentProvider = &selfServing{}

func newSelfServing(service, namespace string) (*selfServing, error) {
	host := service + "." + namespace + ".svc"
	cert, key, err := certutil.GenerateSelfSignedCertKey(host, nil, []string{host})
	if err != nil {
		return nil, fmt.Errorf("making the placeholder serving certificate: %w", err)
	}
	return &selfServing{service: service, namespace: namespace, certPEM: cert, keyPEM: key}, nil
}

// Name identifies the provider in the generic server's logs.
func (s *selfServing) Name() string { return "certapi-self-issued" }

// CurrentCertKeyContent returns the certificate being served and its key.
func (s *selfServing) CurrentCertKeyContent() ([]byte, []byte) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.certPEM, s.keyPEM
}

// AddListener registers the serving controller that reloads on change.
func (s *selfServing) AddListener(l dynamiccertificates.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, l)
}

// checkAuthority is a /readyz check: not ready until CertificateAuthority/default exists. The leader
// creates it with the first CA; a replica that answered before then would serve an API whose one
// cluster-scoped object an admin's `kubectl certapi rotate` or a patch of it finds missing.
func (s *selfServing) checkAuthority(*http.Request) error {
	if !s.caSeen.Load() {
		return errors.New("CertificateAuthority/" + certapiv1alpha1.CertificateAuthorityName + " does not exist yet: waiting for the leader to create it")
	}
	return nil
}

// check is a /readyz check: not ready until certapi serves a certificate from its own CA.
func (s *selfServing) check(*http.Request) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.issuedBy == "" {
		return errors.New("serving a self-signed placeholder: waiting for the leader to issue this replica's certificate for " + s.service + "." + s.namespace + ".svc")
	}
	return nil
}

func (s *selfServing) set(certPEM, keyPEM []byte, issuedBy string, renewAt time.Time) {
	s.mu.Lock()
	s.certPEM, s.keyPEM, s.issuedBy, s.renewAt = certPEM, keyPEM, issuedBy, renewAt
	listeners := append([]dynamiccertificates.Listener(nil), s.listeners...)
	s.mu.Unlock()
	for _, l := range listeners {
		l.Enqueue()
	}
}

// run issues, renews at the renewal time, and re-issues when the Active CA changes, until ctx ends. It
// learns of a new Active CA from a watch on CertificateAuthority/default (and, on the leader, from the
// issuer at once), and otherwise sleeps until the renewal time: no polling. It never gives up: a replica
// without a certificate keeps serving the placeholder and stays unready.
func (s *selfServing) run(ctx context.Context, iss *issuer.Issuer, client versioned.Interface) {
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	factory := externalversions.NewSharedInformerFactoryWithOptions(client, 0, externalversions.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", certapiv1alpha1.CertificateAuthorityName).String()
	}))
	cas := factory.Certapi().V1alpha1().CertificateAuthorities()
	if _, err := cas.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.caSeen.Store(true); poke() },
		UpdateFunc: func(any, any) { poke() },
	}); err != nil {
		klog.ErrorS(err, "Watching the CertificateAuthority; this replica re-issues its certificate only at its renewal time")
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer iss.AddListener(issuer.ListenerFunc(poke))()

	activeSerial := func() string {
		ca, err := cas.Lister().Get(certapiv1alpha1.CertificateAuthorityName)
		if err != nil || ca.Status.Active == nil {
			return ""
		}
		return ca.Status.Active.SerialNumber
	}
	newBackoff := func() wait.Backoff {
		return wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Cap: 10 * time.Second, Steps: math.MaxInt32}
	}
	backoff := newBackoff()
	for ctx.Err() == nil {
		s.mu.RLock()
		issuedBy, renewAt := s.issuedBy, s.renewAt
		s.mu.RUnlock()

		due := issuedBy == "" || !time.Now().Before(renewAt)
		if !due {
			// Re-issue when another CA signs now, after a little jitter so replicas do not stampede.
			if active := activeSerial(); active != "" && active != issuedBy {
				klog.InfoS("The Active CA changed: re-issuing this replica's serving certificate", "was", issuedBy, "active", active)
				due = sleep(ctx, time.Duration(rand.Int64N(int64(2*time.Second))))
			}
		}
		if !due {
			t := time.NewTimer(time.Until(renewAt))
			select {
			case <-ctx.Done():
			case <-changed:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		if err := s.issue(ctx, iss); err != nil {
			delay := backoff.Step()
			klog.ErrorS(err, "Issuing certapi's own serving certificate; retrying", "retryIn", delay)
			sleep(ctx, delay)
			continue
		}
		backoff = newBackoff()
	}
}

func (s *selfServing) issue(ctx context.Context, iss *issuer.Issuer) error {
	key, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	// Name is empty: this certificate belongs to no ServingCertRequest, so no status or Event is written.
	res, err := iss.Issue(ctx, issuer.Request{Namespace: s.namespace, ServiceName: s.service, Duration: 168 * time.Hour, PublicKeyPKIX: pub})
	if err != nil {
		return err
	}
	keyPEM, err := signer.EncodeKeyPEM(key)
	if err != nil {
		return err
	}
	issuedBy, err := signerOf([]byte(res.CertificatePEM), []byte(res.CABundle))
	if err != nil {
		return err
	}
	// The serving chain is the leaf alone: clients trust the CA through the injected caBundle.
	s.set([]byte(res.CertificatePEM), keyPEM, issuedBy, res.RenewalTime)
	if err := iss.PublishServing(ctx, issuedBy); err != nil {
		klog.ErrorS(err, "Recording which CA this replica serves with; a distrusted CA may be dropped late")
	}
	klog.InfoS("Serving with a certificate from certapi's own CA", "service", s.service+"."+s.namespace+".svc", "serialNumber", res.SerialNumber, "notAfter", res.NotAfter, "renewalTime", res.RenewalTime)
	return nil
}

// signerOf returns the serial of the CA in bundle that signed the certificate.
func signerOf(certPEM, bundle []byte) (string, error) {
	leaf, err := signer.ParseBundle(certPEM)
	if err != nil || len(leaf) == 0 {
		return "", fmt.Errorf("parsing an issued certificate: %v", err)
	}
	cas, err := signer.ParseBundle(bundle)
	if err != nil {
		return "", err
	}
	for _, ca := range cas {
		if leaf[0].CheckSignatureFrom(ca) == nil {
			return signer.FormatSerialNumber(ca.SerialNumber), nil
		}
	}
	return "", errors.New("no CA in the bundle signed the issued certificate")
}

// sleep waits d or until ctx ends, and reports whether it waited the whole time.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
