package testhelpers

import (
	"context"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// What the tests of certapi's served certificate check stand up: webhook servers in the test process on
// this machine's address, behind selector-less Services whose EndpointSlices the tests write as the
// EndpointSlice controller would for pods, called by opted-in ValidatingWebhookConfigurations that match
// nothing and fail open. hack/load's --served phase builds the same objects with the functions here that
// take no testing.TB.

// EndpointIP returns an IPv4 address of this machine that an EndpointSlice may hold: kube-apiserver
// refuses loopback and link-local endpoint addresses, so the servers the check probes listen on the first
// other one.
func EndpointIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("listing this machine's addresses: %w", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String(), nil
		}
	}
	return "", fmt.Errorf("this machine has no IPv4 address but loopback and link-local ones (%v): an EndpointSlice may hold neither", addrs)
}

// HostIP is EndpointIP for a test: it fails t when this machine has no such address.
func HostIP(t testing.TB) string {
	t.Helper()
	ip, err := EndpointIP()
	if err != nil {
		t.Fatal(err)
	}
	return ip
}

// TLSServer is a TLS server in the test process whose certificate the test can switch with no API event
// (a webhook that reloads its key pair from disk), counting the handshakes begun: each is a probe.
type TLSServer struct {
	// Addr is the host:port it listens on, the endpoint address to write into an EndpointSlice.
	Addr       string
	cert       atomic.Pointer[tls.Certificate]
	handshakes atomic.Int64
}

// Store makes s present cert from its next handshake on.
func (s *TLSServer) Store(cert tls.Certificate) { s.cert.Store(&cert) }

// Handshakes returns how many handshakes s has begun: how often the check probed it.
func (s *TLSServer) Handshakes() int64 { return s.handshakes.Load() }

// ServeTLS starts a TLS server on host (HostIP, for an EndpointSlice) presenting cert, until the test
// ends. It answers nothing after the handshake: the check never sends a request.
func ServeTLS(t testing.TB, host string, cert tls.Certificate) *TLSServer {
	t.Helper()
	s := &TLSServer{}
	s.Store(cert)
	ln, err := tls.Listen("tcp", net.JoinHostPort(host, "0"), &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { s.handshakes.Add(1); return s.cert.Load(), nil },
	})
	if err != nil {
		t.Fatalf("listening on %s: %v", host, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	s.Addr = ln.Addr().String()
	go AcceptHandshakes(ln)
	return s
}

// AcceptHandshakes completes the TLS handshake of every connection ln (a tls.Listen listener) accepts
// and then reads it until the client closes it or 10 seconds pass: the check sends nothing after the
// handshake. It returns when ln is closed; run it in a goroutine and close ln to stop it.
func AcceptHandshakes(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = c.Close() }()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if err := c.(*tls.Conn).Handshake(); err == nil {
				_, _ = io.Copy(io.Discard, c)
			}
		}()
	}
}

// ClosedAddr returns an address of host that nothing listens on: a port it had a moment ago.
func ClosedAddr(t testing.TB, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatalf("listening on %s: %v", host, err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// CertFromCertapi creates ServingCertRequest svc of ns for Service svc and issues a certificate of
// certapi's CA for it through the servingcerts subresource (IssueServingCert), as a webhook holding its
// own key does.
func CertFromCertapi(t testing.TB, c versioned.Interface, ns, svc string) tls.Certificate {
	t.Helper()
	scr := &certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Name: svc}, Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc}}
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), scr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ServingCertRequest %s/%s: %v", ns, svc, err)
	}
	return IssueServingCert(t, c, ns, svc)
}

// IssueServingCert signs a certificate for a new key through the servingcerts subresource of the
// existing ServingCertRequest svc of ns (with the CA that is Active then), as a webhook that reloads
// does. It waits up to a minute while certapi answers 503 (not ready, or not the leader yet).
func IssueServingCert(t testing.TB, c versioned.Interface, ns, svc string) tls.Certificate {
	t.Helper()
	key := signertest.ECKey(t, elliptic.P256())
	sc := &certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: signertest.CSRPEM(t, key)}}
	var out *certapiv1alpha1.ServingCert
	Eventually(t, 100*time.Millisecond, time.Minute, "a certificate from servingcerts", func(ctx context.Context) (bool, error) {
		var err error
		out, err = c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, svc, sc, metav1.CreateOptions{})
		if apierrors.IsServiceUnavailable(err) {
			return false, nil
		}
		return err == nil, err
	})
	block, _ := pem.Decode([]byte(out.Status.Certificate))
	if block == nil {
		t.Fatalf("servingcerts of %s/%s returned no PEM certificate", ns, svc)
	}
	return tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: key}
}

// CertFromCA signs a certificate for Service svc of ns with ca, a CA certapi never heard of (the tool a
// webhook migrated from, a Secret written by hand).
func CertFromCA(t testing.TB, ca *signer.CA, ns, svc string) tls.Certificate {
	t.Helper()
	key := signertest.ECKey(t, elliptic.P256())
	leaf, err := ca.Sign(signer.LeafRequest{ServiceName: svc, Namespace: ns, ClusterDomain: signertest.ClusterDomain, PublicKey: key.Public(), Duration: 24 * time.Hour})
	if err != nil {
		t.Fatalf("signing a certificate for %s/%s: %v", ns, svc, err)
	}
	return tls.Certificate{Certificate: [][]byte{leaf.Certificate.Raw}, PrivateKey: key}
}

// CertFromCAValid signs, with ca, a certificate for Service svc of ns valid from notBefore to notAfter:
// one already expired, or close to its end, for the served check's time states.
func CertFromCAValid(t testing.TB, ca *signer.CA, ns, svc string, notBefore, notAfter time.Time) tls.Certificate {
	t.Helper()
	key := signertest.ECKey(t, elliptic.P256())
	name := svc + "." + ns + ".svc"
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Certificate, key.Public(), ca.Key)
	if err != nil {
		t.Fatalf("signing a certificate for %s/%s: %v", ns, svc, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// SelectorlessBackend returns Service svc (no selector, port 443 named https) and an EndpointSlice for
// it whose one endpoint is host:port, ready or not, as the EndpointSlice controller writes for a pod.
// Neither names a namespace: the client call that creates them does.
func SelectorlessBackend(svc, host string, port int32, ready bool) (*corev1.Service, *discoveryv1.EndpointSlice) {
	return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: svc},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
		}, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: svc + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
		}
}

// SelectorlessService creates in ns the Service svc and EndpointSlice of SelectorlessBackend for addr
// (host:port, e.g. a TLSServer's Addr), its one endpoint ready or not.
func SelectorlessService(t testing.TB, kube kubernetes.Interface, ns, svc, addr string, ready bool) {
	t.Helper()
	ctx := context.Background()
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("endpoint address %q: %v", addr, err)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		t.Fatalf("endpoint address %q: the port is not a number from 0 to 65535: %v", addr, err)
	}
	service, slice := SelectorlessBackend(svc, host, int32(port), ready)
	if _, err := kube.CoreV1().Services(ns).Create(ctx, service, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating Service %s/%s: %v", ns, svc, err)
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating EndpointSlice %s/%s: %v", ns, slice.Name, err)
	}
}

// OptedInWebhookConfiguration returns ValidatingWebhookConfiguration name, opted in to caBundle
// injection, whose one webhook, webhook (a dotted name such as "svc.served.e2e.certapi.dev"), calls
// Service svc of ns on port 443. Its rules match resource "nothings" of the API group the webhook's name
// gives after its first label, which no server serves, and it fails open: the configuration is only
// there to be injected and checked.
func OptedInWebhookConfiguration(name, webhook, ns, svc string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	_, group, _ := strings.Cut(webhook, ".")
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         webhook,
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svc}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

// WebhookOption changes the configuration InjectedWebhook creates before it is created.
type WebhookOption func(*admissionregistrationv1.ValidatingWebhookConfiguration)

// KeepForeignCA makes the configuration hold bundle, a foreign CA's, in its caBundle and keep it after
// certapi's (certapi.dev/keep-foreign-ca): an object migrated from another tool.
func KeepForeignCA(bundle []byte) WebhookOption {
	return func(c *admissionregistrationv1.ValidatingWebhookConfiguration) {
		c.Annotations[certapiv1alpha1.AnnotationKeepForeignCA] = "true"
		for i := range c.Webhooks {
			c.Webhooks[i].ClientConfig.CABundle = bundle
		}
	}
}

// InjectedWebhook creates the OptedInWebhookConfiguration <ns>-<svc> whose one webhook,
// <svc>.<domain>, calls Service svc of ns, changed by opts, deletes it when the test ends, and returns
// its name. domain tells the webhooks of one test package from another's (tests assert on the names).
func InjectedWebhook(t testing.TB, kube kubernetes.Interface, ns, svc, domain string, opts ...WebhookOption) string {
	t.Helper()
	name := ns + "-" + svc
	config := OptedInWebhookConfiguration(name, svc+"."+domain, ns, svc)
	for _, o := range opts {
		o(config)
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), config, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ValidatingWebhookConfiguration %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}
