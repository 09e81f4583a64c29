package secretdelivery

import (
	"context"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/retry"
	clocktesting "k8s.io/utils/clock/testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/status"
	"github.com/certapi/certapi/pkg/deliveryscope"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	certapifake "github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// testNow is a fixed "now" so that unit tests do not depend on the clock.
var testNow = time.Date(2030, time.March, 4, 12, 0, 0, 0, time.UTC)

const (
	testNamespace = "webhooks"
	testDomain    = signertest.ClusterDomain
)

// fakeAuthority is an issuer.Authority whose CA and leadership a test controls. It signs with the real
// issuance policy (issuer.Policy) and tells its listeners when set changes the CA or the bundle.
type fakeAuthority struct {
	mu        sync.Mutex
	ca        *signer.CA
	bundle    []byte
	ok        bool
	now       func() time.Time // nil: the real clock
	domain    string           // the cluster domain it signs for; testDomain when empty
	issued    []string         // "namespace/name" per signature
	listeners []dynamiccertificates.Listener
}

func (a *fakeAuthority) Signing() (*signer.CA, []byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ca, a.bundle, a.ok
}

func (a *fakeAuthority) Sign(req issuer.Request) (*issuer.Result, error) {
	a.mu.Lock()
	ca, bundle, ok, now, domain := a.ca, a.bundle, a.ok, a.now, a.domain
	a.mu.Unlock()
	if domain == "" {
		domain = testDomain
	}
	if !ok {
		return nil, issuer.ErrNotLeading
	}
	at := time.Now()
	if now != nil {
		at = now()
	}
	res, err := issuer.Policy{ClusterDomain: domain}.Sign(ca, bundle, req, at)
	if err == nil {
		a.mu.Lock()
		a.issued = append(a.issued, req.Namespace+"/"+req.Name)
		a.mu.Unlock()
	}
	return res, err
}

func (a *fakeAuthority) AddListener(l dynamiccertificates.Listener) func() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.listeners = append(a.listeners, l)
	return func() {}
}

func (a *fakeAuthority) set(ca *signer.CA, bundle []byte, ok bool) {
	a.mu.Lock()
	a.ca, a.bundle, a.ok = ca, bundle, ok
	ls := append([]dynamiccertificates.Listener(nil), a.listeners...)
	a.mu.Unlock()
	for _, l := range ls {
		l.Enqueue()
	}
}

func (a *fakeAuthority) issuedFor() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.issued...)
}

// newTestContext is a term's Context on the given fake clientsets, with a real Event broadcaster that
// writes events.k8s.io Events through kube; it is shut down when the test ends.
func newTestContext(tb testing.TB, kube kubernetes.Interface, certapi versioned.Interface) *controller.Context {
	tb.Helper()
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: kube.EventsV1()})
	ctx, cancel := context.WithCancel(context.Background())
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cancel(); b.Shutdown() })
	return controller.NewContext(testDomain, controller.Clients{Kube: kube, Certapi: certapi}, b)
}

// newTestCA makes a CA for testDomain issued at now.
func newTestCA(tb testing.TB, now time.Time) *signer.CA {
	tb.Helper()
	return signertest.NewCA(tb, now, 0)
}

// newRequest makes a request for Service svc delivering into secretName, at generation 1.
func newRequest(name, svc, secretName string) *certapiv1alpha1.ServingCertRequest {
	return &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: name, UID: types.UID("uid-" + name), Generation: 1, ResourceVersion: "1"},
		Spec: certapiv1alpha1.ServingCertRequestSpec{
			ServiceName:  svc,
			SecretName:   secretName,
			Duration:     &metav1.Duration{Duration: certapiv1alpha1.DefaultDuration},
			KeyAlgorithm: certapiv1alpha1.KeyAlgorithmECDSAP256,
		},
	}
}

// deliveredSecret is the Secret certapi writes for req, signed by ca at now, as a create would.
func deliveredSecret(tb testing.TB, req *certapiv1alpha1.ServingCertRequest, ca *signer.CA, bundle []byte, now time.Time) *corev1.Secret {
	tb.Helper()
	c := &Controller{clusterDomain: testDomain, authority: &fakeAuthority{ca: ca, bundle: bundle, ok: true, now: func() time.Time { return now }}}
	cert, err := c.issue(req)
	if err != nil {
		tb.Fatalf("issue: %v", err)
	}
	s := desiredSecret(req, cert)
	s.ResourceVersion = "10"
	return s
}

// harness is a Controller on fake clientsets whose caches a test fills by hand.
type harness struct {
	c         *Controller
	kube      *kubefake.Clientset
	certapi   *certapifake.Clientset
	authority *fakeAuthority
	ca        *signer.CA
	bundle    []byte
	clock     *clocktesting.FakeClock
	recorder  *events.FakeRecorder
	status    *status.Writer
}

func newHarness(tb testing.TB, kubeObjects ...runtime.Object) *harness {
	tb.Helper()
	h := &harness{
		kube: kubefake.NewClientset(kubeObjects...),
		// NewClientset needs a structured-merge schema of certapi's types, which the fake lacks.
		certapi:   certapifake.NewSimpleClientset(),
		authority: &fakeAuthority{},
		ca:        newTestCA(tb, testNow.Add(-time.Hour)),
		clock:     clocktesting.NewFakeClock(testNow),
		recorder:  events.NewFakeRecorder(100),
	}
	h.recorder.Verbose = true
	h.bundle = signer.EncodeBundle(h.ca.Certificate)
	h.authority.now = h.clock.Now
	h.authority.set(h.ca, h.bundle, true)
	h.status = status.New(clientStatusUpdater{h.certapi}, time.Millisecond, 1)
	c, err := New(Options{
		Context:   newTestContext(tb, h.kube, h.certapi),
		Authority: h.authority,
		Status:    h.status,
		Clock:     h.clock,
		// One cluster-wide cache the harness fills; the labelled-namespaces scope has tests of its own.
		Policy: deliveryscope.Policy{Scope: deliveryscope.Cluster},
	})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	c.recorder = h.recorder // the harness reads Events from a fake recorder
	h.c = c
	return h
}

// addRequest puts req into the request cache.
func (h *harness) addRequest(tb testing.TB, req *certapiv1alpha1.ServingCertRequest) {
	tb.Helper()
	if err := h.c.requestInformer.GetIndexer().Add(req); err != nil {
		tb.Fatal(err)
	}
}

// cacheSecret puts a copy of s into the Secret cache, transformed as the informer would.
func (h *harness) cacheSecret(tb testing.TB, s *corev1.Secret) {
	tb.Helper()
	if err := h.c.secretInformer.GetIndexer().Add(viewOf(s)); err != nil {
		tb.Fatal(err)
	}
}

// events drains the recorded Events.
func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// secretWrites lists the create, update, patch and delete actions on Secrets.
func (h *harness) secretWrites() []string {
	var out []string
	for _, a := range h.kube.Actions() {
		if a.GetResource().Resource != "secrets" {
			continue
		}
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			out = append(out, a.GetVerb())
		}
	}
	return out
}

// verifyServing checks that the Secret holds a serving certificate for dnsName that verifies against its
// ca.crt and whose tls.key belongs to it.
func verifyServing(tb testing.TB, s *corev1.Secret, dnsName string, at time.Time) *x509.Certificate {
	tb.Helper()
	cert, err := parseLeaf(s.Data[corev1.TLSCertKey])
	if err != nil {
		tb.Fatalf("tls.crt: %v", err)
	}
	roots, err := signer.ParseBundle(s.Data[certapiv1alpha1.SecretKeyCABundle])
	if err != nil {
		tb.Fatalf("ca.crt: %v", err)
	}
	pool := x509.NewCertPool()
	for _, r := range roots {
		pool.AddCert(r)
	}
	if _, err := cert.Verify(x509.VerifyOptions{
		DNSName:     dnsName,
		Roots:       pool,
		CurrentTime: at,
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		tb.Fatalf("tls.crt does not verify for %s against ca.crt: %v", dnsName, err)
	}
	if !strings.HasPrefix(string(s.Data[corev1.TLSPrivateKeyKey]), "-----BEGIN PRIVATE KEY-----") {
		tb.Fatalf("tls.key is not a PKCS#8 PEM key")
	}
	if keyMarker(s.Data[corev1.TLSPrivateKeyKey]) != publicKeyMarker(cert) {
		tb.Fatalf("tls.key does not belong to tls.crt")
	}
	return cert
}

// clientStatusUpdater is a test double of the leader's status writes: production writes request status
// in-process through certapi's own storage (servingcertrequest.StatusUpdater, run against etcd by
// test/integration/registry), which a unit test on fake clientsets does not have. It reads and writes
// the fake clientset's status subresource, so that a test reads the status the controller wrote where
// it reads every other object. Like StatusUpdater, a request that does not exist is no error.
type clientStatusUpdater struct{ client versioned.Interface }

func (c clientStatusUpdater) UpdateStatus(ctx context.Context, key types.NamespacedName, mutate func(*certapiv1alpha1.ServingCertRequest) bool) error {
	scrs := c.client.CertapiV1alpha1().ServingCertRequests(key.Namespace)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := scrs.Get(ctx, key.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile: nothing to report on
		}
		if err != nil {
			return fmt.Errorf("getting %s: %w", key, err)
		}
		if !mutate(obj) {
			return nil
		}
		_, err = scrs.UpdateStatus(ctx, obj, metav1.UpdateOptions{FieldManager: certapiv1alpha1.FieldManager})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}
