package servedcert

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cmd/kubectlcertapi"
	"github.com/certapi/certapi/pkg/controller/servedcert"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// hostIP is an IPv4 address of this machine that an EndpointSlice may hold: kube-apiserver refuses
// loopback and link-local endpoint addresses, so the test servers listen on the first other one.
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatalf("this machine has no IPv4 address but loopback and link-local ones (%v): an EndpointSlice may hold neither", addrs)
	return ""
}

// server is a TLS server in the test process whose certificate the test can switch with no API event.
type server struct {
	addr string
	cert atomic.Pointer[tls.Certificate]
	// handshakes counts the handshakes begun: each is a probe of the check.
	handshakes atomic.Int64
}

// serve starts a TLS server on hostIP presenting cert, until the test ends. It answers nothing: the
// check never sends a request.
func serve(t *testing.T, cert tls.Certificate) *server {
	t.Helper()
	s := &server{}
	s.cert.Store(&cert)
	ln, err := tls.Listen("tcp", net.JoinHostPort(hostIP(t), "0"), &tls.Config{
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { s.handshakes.Add(1); return s.cert.Load(), nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	s.addr = ln.Addr().String()
	go func() {
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
	}()
	return s
}

// closedPort returns an address of hostIP's nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(hostIP(t), "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// fromCertapi issues a certificate of certapi's CA for Service svc of ns through the servingcerts
// subresource, as a webhook holding its own key does.
func fromCertapi(t *testing.T, ns, svc string) tls.Certificate {
	t.Helper()
	c, _ := testhelpers.Clients(t, cp.AdminConfig)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), e2etest.Request(svc, svc), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := signertest.ECKey(t, elliptic.P256())
	var out *certapiv1alpha1.ServingCert
	e2etest.Eventually(t, 60*time.Second, "a certificate from servingcerts", func(ctx context.Context) (bool, error) {
		var err error
		out, err = c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, svc, e2etest.ServingCert(signertest.CSRPEM(t, key), nil), metav1.CreateOptions{})
		if apierrors.IsServiceUnavailable(err) {
			return false, nil
		}
		return err == nil, err
	})
	block, _ := pem.Decode([]byte(out.Status.Certificate))
	return tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: key}
}

// fromOtherCA signs a certificate for Service svc of ns with a CA certapi never heard of (the tool a
// webhook migrated from, a Secret written by hand).
func fromOtherCA(t *testing.T, ca *signer.CA, ns, svc string) tls.Certificate {
	t.Helper()
	key := signertest.ECKey(t, elliptic.P256())
	leaf, err := ca.Sign(signer.LeafRequest{ServiceName: svc, Namespace: ns, ClusterDomain: signertest.ClusterDomain, PublicKey: key.Public(), Duration: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{leaf.Certificate.Raw}, PrivateKey: (*ecdsa.PrivateKey)(key)}
}

// backend makes Service svc of ns (no selector, port 443 named https) and an EndpointSlice for it with
// one endpoint at addr, ready or not, as the EndpointSlice controller would write for a pod.
func backend(t *testing.T, kube kubernetes.Interface, ns, svc, addr string, ready bool) {
	t.Helper()
	ctx := context.Background()
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portText)
	_, err = kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// webhookConfiguration creates a ValidatingWebhookConfiguration opted in to injection whose one webhook
// names Service svc of ns, and deletes it when the test ends. Its rules match no resource that exists,
// and its failure policy is Ignore: the configuration is only there to be checked.
func webhookConfiguration(t *testing.T, kube kubernetes.Interface, ns, svc string) string {
	t.Helper()
	name := ns + "-" + svc
	_, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    svc + ".served.e2e.certapi.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svc}},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"served.e2e.certapi.dev"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// latest returns the reason and note of the newest Event the check recorded about the
// ValidatingWebhookConfiguration name ("" when none).
func latest(ctx context.Context, kube kubernetes.Interface, name string) (reason, note string, err error) {
	list, err := kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", err
	}
	var at time.Time
	for _, ev := range list.Items {
		if ev.ReportingController != servedcert.ReportingController || ev.Regarding.Name != name || ev.Regarding.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		if strings.Contains(ev.Note, "PRIVATE KEY") || strings.Contains(ev.Note, "CERTIFICATE") {
			return "", "", fmt.Errorf("the Event carries PEM: %q", ev.Note)
		}
		if t := ev.EventTime.Time; reason == "" || t.After(at) {
			reason, note, at = ev.Reason, ev.Note, t
		}
	}
	return reason, note, nil
}

// waitServing waits until ServingCertRequest name of ns has the Serving condition status and reason
// (status "" waits for it to have none), and returns its message.
func waitServing(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string, timeout time.Duration) string {
	t.Helper()
	c, _ := testhelpers.Clients(t, cp.AdminConfig)
	var msg string
	e2etest.Eventually(t, timeout, fmt.Sprintf("ServingCertRequest %s/%s Serving=%s %s", ns, name, status, reason), func(ctx context.Context) (bool, error) {
		scr, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(scr.Status.Conditions, certapiv1alpha1.ConditionServing)
		if cond == nil {
			return status == "", nil
		}
		msg = cond.Message
		return cond.Status == status && cond.Reason == reason, nil
	})
	return msg
}

// waitFor waits until the newest Event about the configuration name says state, and returns its note.
func waitFor(t *testing.T, kube kubernetes.Interface, name, state string, timeout time.Duration) string {
	t.Helper()
	var reason, note string
	e2etest.Eventually(t, timeout, "ValidatingWebhookConfiguration "+name+" reported "+state, func(ctx context.Context) (bool, error) {
		var err error
		reason, note, err = latest(ctx, kube, name)
		return reason == state, err
	})
	return note
}

// TestServedCertificates: certapi checks, per webhook, what the Service's ready endpoints serve against
// the bundle it injected, and says so in an Event on the webhook configuration and in the metric.
func TestServedCertificates(t *testing.T) {
	_, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	other := signertest.NewCA(t, time.Now().Add(-time.Hour), 0)

	good := serve(t, fromCertapi(t, ns, "good"))
	untrusted := serve(t, fromOtherCA(t, other, ns, "untrusted"))
	wrongName := serve(t, fromCertapi(t, ns, "elsewhere")) // certapi's certificate, for another Service
	switching := serve(t, fromCertapi(t, ns, "switching"))
	notReady := serve(t, fromCertapi(t, ns, "notready"))

	backend(t, kube, ns, "good", good.addr, true)
	backend(t, kube, ns, "untrusted", untrusted.addr, true)
	backend(t, kube, ns, "wrongname", wrongName.addr, true)
	backend(t, kube, ns, "switching", switching.addr, true)
	backend(t, kube, ns, "notready", notReady.addr, false)
	backend(t, kube, ns, "closed", closedPort(t), true)

	cases := []struct{ svc, state, inNote string }{
		{"good", "Verified", "signed by the CA"},
		{"untrusted", "Untrusted", `signed by "CN=` + other.Certificate.Subject.CommonName + `"`},
		{"wrongname", "NameMismatch", "not for wrongname." + ns + ".svc"},
		{"notready", "NoEndpoints", "no ready endpoint for port 443 (https)"},
		{"closed", "Unreachable", "connection refused"},
		{"switching", "Verified", "signed by the CA"},
	}
	names := map[string]string{}
	for _, c := range cases {
		names[c.svc] = webhookConfiguration(t, kube, ns, c.svc)
	}
	// A webhook found failing gets a Warning Event saying what its endpoint serves; a healthy one gets
	// none (it shows in the metric, status and the Serving condition below).
	for _, c := range cases {
		if c.state == "Verified" {
			continue
		}
		note := waitFor(t, kube, names[c.svc], c.state, 60*time.Second)
		if !strings.Contains(note, c.inNote) {
			t.Errorf("%s: the Event says %q; want it to say %q", c.svc, note, c.inNote)
		}
		t.Logf("%s: %s: %s", c.svc, c.state, note)
	}

	// The metric counts endpoints by state (certapi's own APIService adds a Verified one), and a series per
	// webhook says its state.
	client, err := cp.CertapiHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 30*time.Second, "certapi_served_certificates by state and certapi_served_certificate_target by webhook", func(ctx context.Context) (bool, error) {
		resp, err := client.Get(cp.CertapiURL + "/metrics")
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		// And one series per webhook, with its state.
		for _, c := range cases {
			line := fmt.Sprintf(`certapi_served_certificate_target{kind="ValidatingWebhookConfiguration",name=%q,state=%q,webhook="%s.served.e2e.certapi.dev"} 1`, names[c.svc], c.state, c.svc)
			if !strings.Contains(string(body), line+"\n") {
				return false, nil
			}
		}
		for state, least := range map[string]int{"Verified": 2, "Untrusted": 1, "NameMismatch": 1, "NoEndpoints": 1, "Unreachable": 1} {
			m := regexp.MustCompile(`(?m)^certapi_served_certificates\{state="` + state + `"\} (\d+)$`).FindSubmatch(body)
			if m == nil {
				return false, nil
			}
			if n, _ := strconv.Atoi(string(m[1])); n < least {
				return false, nil
			}
		}
		return true, nil
	})

	// CertificateAuthority/default counts the webhooks by state and names the worst.
	c, _ := testhelpers.Clients(t, cp.AdminConfig)
	wantWorst := []string{
		"ValidatingWebhookConfiguration " + names["untrusted"] + " webhook untrusted.served.e2e.certapi.dev: Untrusted",
		"ValidatingWebhookConfiguration " + names["wrongname"] + " webhook wrongname.served.e2e.certapi.dev: NameMismatch",
		"ValidatingWebhookConfiguration " + names["closed"] + " webhook closed.served.e2e.certapi.dev: Unreachable",
		"ValidatingWebhookConfiguration " + names["notready"] + " webhook notready.served.e2e.certapi.dev: NoEndpoints",
	}
	var served *certapiv1alpha1.ServedSummary
	e2etest.Eventually(t, 30*time.Second, "CertificateAuthority/default status.served", func(ctx context.Context) (bool, error) {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		served = ca.Status.Served
		if served == nil || served.Verified < 2 || served.Untrusted < 1 || served.NameMismatch < 1 || served.Unreachable < 1 || served.NoEndpoints < 1 {
			return false, nil
		}
		for _, w := range wantWorst {
			if !slices.Contains(served.WorstTargets, w) {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("status.served: %+v", *served)

	// kubectl certapi check lists them, as a warning: they are their owners' to fix, not certapi's.
	ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(context.Background(), certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := kubectlcertapi.PrintChecks(&table, kubectlcertapi.Check(kubectlcertapi.CheckInput{CA: ca, APIService: &apiregistrationv1.APIService{}, Now: time.Now()})); err != nil {
		t.Fatal(err)
	}
	if line := regexp.MustCompile(`(?m)^served certificates\s+WARNING\s+.*$`).FindString(table.String()); !strings.Contains(line, wantWorst[0]) {
		t.Errorf("check does not list %q as a warning:\n%s", wantWorst[0], table.String())
	}

	// The ServingCertRequest of a Service that injected webhooks call says whether its pods serve its
	// certificate; one whose Service no webhook calls has no Serving condition.
	if msg := waitServing(t, ns, "good", metav1.ConditionTrue, "Verified", 30*time.Second); !strings.Contains(msg, "signed by the CA") {
		t.Errorf("the Serving condition of good says %q; want it to name the CA that signed what is served", msg)
	}
	for _, svc := range []string{"good", "switching"} {
		if reason, note, err := latest(context.Background(), kube, names[svc]); err != nil || reason != "" {
			t.Errorf("%s is Verified from the start, and yet has an Event %s %q (%v)", svc, reason, note, err)
		}
	}
	waitServing(t, ns, "switching", metav1.ConditionTrue, "Verified", 30*time.Second)
	waitServing(t, ns, "notready", metav1.ConditionFalse, "NoEndpoints", 30*time.Second)
	waitServing(t, ns, "elsewhere", "", "", 5*time.Second)

	// A server that switches to a certificate of another CA, with no API event at all: the periodic
	// re-probe finds it within an interval or so.
	switching.cert.Store(ptr.To(fromOtherCA(t, other, ns, "switching")))
	switched := time.Now()
	waitFor(t, kube, names["switching"], "Untrusted", 4*interval+10*time.Second)
	msg := waitServing(t, ns, "switching", metav1.ConditionFalse, "Untrusted", 30*time.Second)
	if !strings.Contains(msg, other.Certificate.Subject.CommonName) {
		t.Errorf("the Serving condition says %q; want it to name the CA that signed what is served, %s", msg, other.Certificate.Subject.CommonName)
	}
	t.Logf("the switch to a foreign certificate was seen after %s (interval %s)", time.Since(switched).Round(time.Millisecond), interval)
}
