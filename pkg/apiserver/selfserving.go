package apiserver

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/tools/cache"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/erasure"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/servingcert"
	"github.com/certapi/certapi/pkg/signer"
)

// certapi's own serving certificate is renewed by the one renewal loop there is, pkg/servingcert's
// Source, which every operator runs too, with one trigger rule: renew at the certificate's renewalTime
// (less jitter), and re-issue as soon as CertificateAuthority/default names an Active CA whose subject key
// id is not the certificate's authority key id. Only its issuer differs: selfIssuer signs in-process.
const (
	// selfDuration is the lifetime of certapi's own serving certificate.
	selfDuration = 168 * time.Hour
	// selfCAChangeDelay bounds the random delay before a replica re-issues after the Active CA changed:
	// a few replicas, not every operator's pods in the cluster, so a short spread is enough.
	selfCAChangeDelay = 2 * time.Second
	// selfInitialBackoff and selfMaxBackoff bound the retries of a failed issuance, and of a failed record
	// of which CA signed it: a replica that starts before a leader is elected gets its certificate within
	// moments of the election.
	selfInitialBackoff = 200 * time.Millisecond
	selfMaxBackoff     = 10 * time.Second
)

// selfAuthority is what certapi's own serving certificate needs of this replica's issuer (*issuer.Issuer):
// a signature, here or through the leader, and the record of which CA signed what this replica serves.
type selfAuthority interface {
	Issue(ctx context.Context, req issuer.Request) (*issuer.Result, error)
	PublishServing(ctx context.Context, caSerial string) error
}

var _ selfAuthority = (*issuer.Issuer)(nil)

// selfServing is certapi's own serving certificate, held in memory and swapped without a restart
// through the generic server's dynamic certificate machinery (it is the server's
// dynamiccertificates.CertKeyContentProvider). A servingcert.Source issues and renews it; selfServing
// hands each certificate to the server and records in etcd which CA signed it, which the leader's
// distrust of a CA waits for. Until the first certificate arrives it serves a self-signed placeholder: an
// empty provider would fail every handshake, and /readyz says why the replica is not ready instead.
type selfServing struct {
	service, namespace string

	// source renews the certificate; nil until run starts it.
	source atomic.Pointer[servingcert.Source]
	// logger is run's, for CurrentCertKeyContent (which kube's serving code calls without a context);
	// nil until run starts.
	logger atomic.Pointer[klog.Logger]
	// caSeen: this replica's watch has seen CertificateAuthority/default, the object every admin command
	// (rotate, distrust, status) starts from.
	caSeen atomic.Bool
	// distrustedRecord is where this replica keeps its copy of the record of distrusted CAs
	// (snapshot.DistrustedFileName, erasure.RecordDistrusted): on its own volume, so that a restore onto
	// any member's volume finds it; empty when there is nowhere to keep it.
	distrustedRecord string
	// record queues its one key (selfRecordKey) each time the Source serves a new certificate; its sync
	// records the CA that signed it (recordServing), and retries a failed record with backoff.
	record *controller.Queue[string]
	// issuer is the run's selfIssuer, for recordServing; nil until run starts.
	issuer atomic.Pointer[selfIssuer]

	mu        sync.Mutex
	listeners []dynamiccertificates.Listener
	// encoded is the certificate certPEM and keyPEM were encoded from; nil while they hold the placeholder.
	encoded         *tls.Certificate
	certPEM, keyPEM []byte
}

var _ dynamiccertificates.CertKeyContentProvider = &selfServing{}

func newSelfServing(service, namespace string) (*selfServing, error) {
	host := service + "." + namespace + ".svc"
	cert, key, err := certutil.GenerateSelfSignedCertKey(host, nil, []string{host})
	if err != nil {
		return nil, fmt.Errorf("making the placeholder serving certificate: %w", err)
	}
	s := &selfServing{service: service, namespace: namespace, certPEM: cert, keyPEM: key}
	s.record = controller.NewQueue(controller.QueueOptions[string]{
		Name: "self-serving-record", Sync: s.recordServing, BackoffBase: selfInitialBackoff, BackoffMax: selfMaxBackoff,
	})
	return s, nil
}

// selfRecordKey is the record queue's one key: this replica serves one certificate.
const selfRecordKey = "serving"

func (s *selfServing) host() string { return s.service + "." + s.namespace + ".svc" }

// Name identifies the provider in the generic server's logs.
func (s *selfServing) Name() string { return "certapi-self-issued" }

// CurrentCertKeyContent returns the certificate being served and its key, in PEM: the Source's current
// one, or the placeholder before the first.
func (s *selfServing) CurrentCertKeyContent() ([]byte, []byte) {
	var cert *tls.Certificate
	if src := s.source.Load(); src != nil {
		cert, _ = src.GetCertificate(nil)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cert != nil && cert != s.encoded {
		certPEM, keyPEM, err := encodeCertificate(cert)
		if err != nil {
			if l := s.logger.Load(); l != nil {
				l.Error(err, "Encoding certapi's own serving certificate; still serving the previous one")
			}
			return s.certPEM, s.keyPEM
		}
		s.encoded, s.certPEM, s.keyPEM = cert, certPEM, keyPEM
	}
	return s.certPEM, s.keyPEM
}

// AddListener registers the serving controller that reloads on change.
func (s *selfServing) AddListener(l dynamiccertificates.Listener) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, l)
}

// Enqueue is the Source's listener: it is told of every new certificate, and tells the serving controller
// and the record loop in turn. It does not block.
func (s *selfServing) Enqueue() {
	s.mu.Lock()
	listeners := append([]dynamiccertificates.Listener(nil), s.listeners...)
	s.mu.Unlock()
	for _, l := range listeners {
		l.Enqueue()
	}
	s.record.Add(selfRecordKey)
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

// check is a /readyz check: not ready until certapi serves a certificate from its own CA, nor once that
// has expired.
func (s *selfServing) check(*http.Request) error {
	src := s.source.Load()
	switch {
	case src == nil || src.NotAfter().IsZero():
		return errors.New("serving a self-signed placeholder: waiting for the leader to issue this replica's certificate for " + s.host())
	case !src.Ready():
		return fmt.Errorf("this replica's certificate for %s expired at %s and renewing it keeps failing (see the log)", s.host(), src.NotAfter().UTC().Format(time.RFC3339))
	}
	return nil
}

// run renews certapi's own serving certificate until ctx ends: a servingcert.Source through selfIssuer
// (signing through auth, watching CertificateAuthority/default in cas, this server's own storage), and
// meanwhile the record of which CA signed the certificate served. It never gives up: a replica without a
// certificate keeps serving the placeholder and stays unready. It runs once per selfServing.
func (s *selfServing) run(ctx context.Context, auth selfAuthority, cas cache.ListerWatcherWithContext) {
	logger := klog.FromContext(ctx)
	s.logger.Store(&logger)
	self := &selfIssuer{authority: auth, namespace: s.namespace, service: s.service, cas: cas, seen: func(ctx context.Context, ca *certapiv1alpha1.CertificateAuthority) {
		s.caSeen.Store(true)
		if err := erasure.RecordDistrusted(ctx, s.distrustedRecord, ca.Status); err != nil {
			// Written again at the CertificateAuthority's next change, and by the leader's erasure controller.
			klog.FromContext(ctx).Error(err, "Recording the distrusted CAs on this replica's volume")
		}
	}}
	s.issuer.Store(self)
	src, err := servingcert.New(servingcert.Options{
		Issuer:         self,
		Namespace:      s.namespace,
		Name:           s.service,
		CAChangeDelay:  selfCAChangeDelay,
		InitialBackoff: selfInitialBackoff,
		MaxBackoff:     selfMaxBackoff,
		Logger:         logger.WithName("self-serving"),
	})
	if err != nil {
		logger.Error(err, "Starting the renewal of certapi's own serving certificate; serving the placeholder")
		s.record.ShutDown()
		return
	}
	src.AddListener(s)
	s.source.Store(src)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = src.Start(ctx) })
	_ = s.record.Run(ctx)
}

// recordServing records in etcd the serial of the CA that signed the certificate the Source serves now
// (issuer.PublishServing): the leader drops a distrusted CA only once no replica serves from it
// (issuer.ServingNotFrom, woken by issuer.WatchServing). It is the record queue's sync: queued each time
// the Source serves a new certificate, and retried with backoff until it succeeds or a newer certificate
// supersedes it.
func (s *selfServing) recordServing(ctx context.Context, _ string) (controller.Result, error) {
	src, self := s.source.Load(), s.issuer.Load()
	if src == nil || self == nil {
		return controller.Result{}, nil
	}
	cert, err := src.GetCertificate(nil)
	if err != nil {
		return controller.Result{}, nil // nothing served yet
	}
	caSerial, ok := self.signerOf(cert.Leaf)
	if !ok {
		return controller.Result{}, nil // issued before the last issuance: a newer one is on its way
	}
	if err := self.authority.PublishServing(ctx, caSerial); err != nil {
		return controller.Result{}, fmt.Errorf("recording which CA this replica serves with (a distrust of another CA waits for this record): %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Recorded which CA this replica serves with", "caSerialNumber", caSerial, "serialNumber", signer.FormatSerialNumber(cert.Leaf.SerialNumber))
	return controller.Result{}, nil
}

// encodeCertificate returns cert's chain and private key in PEM.
func encodeCertificate(cert *tls.Certificate) (certPEM, keyPEM []byte, err error) {
	for _, der := range cert.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	key, ok := cert.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("the private key is a %T, not a crypto.Signer", cert.PrivateKey)
	}
	keyPEM, err = signer.EncodeKeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// selfRequest is what a replica asks its issuer to sign for its own serving certificate, before the key:
// the Service certapi serves as, with no other name, for selfDuration. Name is empty: the certificate
// belongs to no ServingCertRequest.
func selfRequest(namespace, service string) issuer.Request {
	return issuer.Request{Namespace: namespace, ServiceName: service, Duration: selfDuration}
}

// selfHandoffCheck is the leader's check of a request a follower hands it (issuer.HandoffCheck): a request
// of no ServingCertRequest is signed only when it is exactly what a replica asks for its own serving
// certificate (selfRequest for this server's Service); every other request goes to stored, the check
// against the stored ServingCertRequest.
func selfHandoffCheck(namespace, service string, stored issuer.HandoffCheck) issuer.HandoffCheck {
	own := selfRequest(namespace, service)
	return func(ctx context.Context, req issuer.Request) error {
		if req.Name != "" {
			return stored(ctx, req)
		}
		if req.Namespace != own.Namespace || req.ServiceName != own.ServiceName || len(req.DNSNames) > 0 || req.Duration != own.Duration ||
			req.RenewBefore != 0 || req.Path != "" || req.MaxLifetime != 0 {
			return fmt.Errorf("%w: a request of no ServingCertRequest that is not certapi's own serving certificate (Service %s/%s)",
				issuer.ErrHandoffRefused, req.Namespace, req.ServiceName)
		}
		return nil
	}
}

// selfIssuer is the servingcert.Issuer of certapi's own serving certificate. It signs through this
// replica's issuer in-process (the leader signs at once, a follower hands the request to it through
// etcd), not through kube-apiserver and back into certapi, which would need certapi to be Available
// already; and it watches CertificateAuthority/default in this server's own storage. The certificate
// belongs to no ServingCertRequest, so no status or Event is written for it.
type selfIssuer struct {
	authority          selfAuthority
	namespace, service string
	cas                cache.ListerWatcherWithContext
	// seen is called for every state of CertificateAuthority/default the watch delivers.
	seen func(context.Context, *certapiv1alpha1.CertificateAuthority)

	mu sync.Mutex
	// leafSerial, caSerial: the last certificate issued, and the serial of the CA that signed it.
	leafSerial, caSerial string
}

var _ servingcert.Issuer = &selfIssuer{}

// CreateServingCert signs the key of sc's certificate request for certapi's own Service; namespace and
// name are those the Source was given, and name no ServingCertRequest.
func (i *selfIssuer) CreateServingCert(ctx context.Context, _, _ string, sc *certapiv1alpha1.ServingCert) (*certapiv1alpha1.ServingCert, error) {
	csr, err := signer.ParseCSR([]byte(sc.Spec.CertificateRequest))
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(csr.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encoding the public key: %w", err)
	}
	// Name is empty: this certificate belongs to no ServingCertRequest, so no status or Event is written,
	// and the signature is counted under the path "self".
	req := selfRequest(i.namespace, i.service)
	req.PublicKeyPKIX = pub
	res, err := i.authority.Issue(ctx, req)
	if err != nil {
		return nil, err
	}
	caSerial, err := signerOf([]byte(res.CertificatePEM), []byte(res.CABundle))
	if err != nil {
		return nil, err
	}
	i.mu.Lock()
	i.leafSerial, i.caSerial = res.SerialNumber, caSerial
	i.mu.Unlock()
	return &certapiv1alpha1.ServingCert{Status: certapiv1alpha1.ServingCertStatus{
		Certificate:  res.CertificatePEM, // the leaf, and for an intermediate CA the chain to serve with it
		CABundle:     res.CABundle,
		SerialNumber: res.SerialNumber,
		NotBefore:    &metav1.Time{Time: res.NotBefore},
		NotAfter:     &metav1.Time{Time: res.NotAfter},
		RenewalTime:  &metav1.Time{Time: res.RenewalTime},
	}}, nil
}

// CreateServingCertRequest is never called (the Source is given no CreateIfMissing): certapi's own
// certificate belongs to no ServingCertRequest.
func (i *selfIssuer) CreateServingCertRequest(context.Context, *certapiv1alpha1.ServingCertRequest) error {
	return errors.New("certapi's own serving certificate belongs to no ServingCertRequest")
}

// WatchCertificateAuthority watches CertificateAuthority/default in this server's storage, and tells seen
// of each state of it.
func (i *selfIssuer) WatchCertificateAuthority(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := i.cas.WatchWithContext(ctx, opts)
	if err != nil {
		return nil, err
	}
	return watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
		if ca, ok := ev.Object.(*certapiv1alpha1.CertificateAuthority); ok && ca.Name == certapiv1alpha1.CertificateAuthorityName &&
			(ev.Type == watch.Added || ev.Type == watch.Modified) {
			i.seen(ctx, ca)
		}
		return ev, true
	}), nil
}

// signerOf returns the serial of the CA that signed leaf, when leaf is the certificate issued last.
func (i *selfIssuer) signerOf(leaf *x509.Certificate) (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if leaf == nil || i.leafSerial == "" || signer.FormatSerialNumber(leaf.SerialNumber) != i.leafSerial {
		return "", false
	}
	return i.caSerial, true
}

// signerOf returns the serial of the CA that signed the certificate, the first block of certPEM: one of
// the CA certificates served with it (the chain of a CA an organisation's CA signed, whose bundle may
// hold only the organisation's root, --ca-bundle-anchor=Root), or else one of bundle's (a self-signed CA).
func signerOf(certPEM, bundle []byte) (string, error) {
	certs, err := signer.ParseBundle(certPEM)
	if err != nil || len(certs) == 0 {
		return "", fmt.Errorf("parsing an issued certificate: %v", err)
	}
	cas, err := signer.ParseBundle(bundle)
	if err != nil {
		return "", err
	}
	leaf := certs[0]
	for _, ca := range append(certs[1:], cas...) {
		if ca.IsCA && leaf.CheckSignatureFrom(ca) == nil {
			return signer.FormatSerialNumber(ca.SerialNumber), nil
		}
	}
	return "", errors.New("neither the chain served with the issued certificate nor the bundle holds the CA that signed it")
}
