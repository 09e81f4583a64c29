package secretdelivery

import (
	"crypto/x509"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/status"
	certapifake "github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
	"github.com/certapi/certapi/pkg/generated/informers/externalversions"
	"github.com/certapi/certapi/pkg/signer"
)

// testNow is a fixed "now" so that unit tests do not depend on the clock.
var testNow = time.Date(2030, time.March, 4, 12, 0, 0, 0, time.UTC)

const (
	testNamespace = "webhooks"
	testDomain    = "cluster.local"
)

// fakeAuthority is an issuer.Authority whose CA and leadership a test controls.
type fakeAuthority struct {
	mu     sync.Mutex
	ca     *signer.CA
	bundle []byte
	ok     bool
}

func (a *fakeAuthority) Signing() (*signer.CA, []byte, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ca, a.bundle, a.ok
}

func (a *fakeAuthority) set(ca *signer.CA, bundle []byte, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ca, a.bundle, a.ok = ca, bundle, ok
}

// newTestCA makes a CA for testDomain issued at now.
func newTestCA(tb testing.TB, now time.Time) *signer.CA {
	tb.Helper()
	ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: testDomain, Now: now})
	if err != nil {
		tb.Fatalf("NewCA: %v", err)
	}
	return ca
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
	c := &Controller{clusterDomain: testDomain}
	cert, err := c.issue(req, ca, now)
	if err != nil {
		tb.Fatalf("issue: %v", err)
	}
	s := desiredSecret(req, cert, bundle)
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

	mu     sync.Mutex
	issued []string // "namespace/name" per OnIssued call
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
	h.authority.set(h.ca, h.bundle, true)
	h.status = status.New(h.certapi, time.Millisecond)
	c, err := New(Options{
		Kube:          h.kube,
		Informers:     externalversions.NewSharedInformerFactory(h.certapi, 0),
		Authority:     h.authority,
		Status:        h.status,
		ClusterDomain: testDomain,
		Clock:         h.clock,
		Recorder:      h.recorder,
		OnIssued: func(namespace, name string, _, _ time.Time) {
			h.mu.Lock()
			h.issued = append(h.issued, namespace+"/"+name)
			h.mu.Unlock()
		},
	})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
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
	cp, _ := trimSecret(s.DeepCopy())
	if err := h.c.secretInformer.GetIndexer().Add(cp); err != nil {
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
	roots, err := signer.ParseBundle(s.Data[keyCABundle])
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
