package monitoring

import (
	"context"
	"crypto"
	"crypto/elliptic"
	"crypto/tls"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
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
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestServedCertificateAlerts runs the served certificate alerts in a real Prometheus scraping a real
// certapi whose check probes real TLS servers behind webhook configurations: one serving certapi's
// certificate (Verified), one a certificate of another CA (Untrusted), one whose port nothing listens on
// (Unreachable). CertapiServedCertificateRejected fires for the untrusted one only, naming it from the
// series' labels; CertapiServedCertificateUnreachable (info) for the unreachable one only; neither fires
// for the verified one, and CertapiServedCertificateExpiringSoon for none. Their for: durations are
// promtool's to test (prometheusrule_test.yaml); here they are set to 0 so that the expressions and the
// labels they rely on are shown on certapi's real series within seconds.
func TestServedCertificateAlerts(t *testing.T) {
	if _, err := framework.PrometheusBinary(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cp := framework.StartT(t, framework.Options{CertapiArgs: []string{"--served-check-interval=3s", "--served-check-timeout=1s"}})
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := "served-alerts"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := hostIP(t)
	other := signertest.NewCA(t, time.Now().Add(-time.Hour), 0)
	good := serveTLS(t, host, certFromCertapi(t, c, ns, "good"))
	untrusted := serveTLS(t, host, certFromOtherCA(t, other, ns, "untrusted"))
	closed := closedAddr(t, host)
	names := map[string]string{}
	for svc, addr := range map[string]string{"good": good, "untrusted": untrusted, "closed": closed} {
		selectorlessService(t, kube, ns, svc, addr)
		names[svc] = opt(t, kube, ns, svc)
	}

	m := ReadMonitoring(t)
	for g := range m.Rule.Spec.Groups {
		for r := range m.Rule.Spec.Groups[g].Rules {
			if rule := &m.Rule.Spec.Groups[g].Rules[r]; strings.HasPrefix(rule.Alert, "CertapiServedCertificate") {
				rule.For = "0s"
			}
		}
	}
	dir := t.TempDir()
	m.WriteRuleFiles(t, dir)
	api := startPrometheus(t, cp, dir)

	type alert struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		State       string            `json:"state"`
	}
	find := func(alerts []alert, name, object string) *alert {
		for i, a := range alerts {
			if a.Labels["alertname"] == name && a.Labels["name"] == object {
				return &alerts[i]
			}
		}
		return nil
	}
	// Wait until Prometheus has every webhook's state, then for the two alerts to fire.
	for svc, state := range map[string]string{"good": "Verified", "untrusted": "Untrusted", "closed": "Unreachable"} {
		q := fmt.Sprintf(`certapi_served_certificate_target{kind="ValidatingWebhookConfiguration", name=%q, webhook=%q, state=%q} == 1`, names[svc], svc+".alerts.certapi.dev", state)
		testhelpers.Eventually(t, 500*time.Millisecond, 90*time.Second, q, func(ctx context.Context) (bool, error) {
			res, err := query(ctx, api, q)
			return err == nil && len(res) == 1, nil
		})
	}
	var alerts struct {
		Alerts []alert `json:"alerts"`
	}
	testhelpers.Eventually(t, 500*time.Millisecond, 60*time.Second, "CertapiServedCertificateRejected and CertapiServedCertificateUnreachable to fire", func(ctx context.Context) (bool, error) {
		if err := get(ctx, api+"/api/v1/alerts", &alerts); err != nil {
			return false, nil
		}
		rejected := find(alerts.Alerts, "CertapiServedCertificateRejected", names["untrusted"])
		unreachable := find(alerts.Alerts, "CertapiServedCertificateUnreachable", names["closed"])
		return rejected != nil && rejected.State == "firing" && unreachable != nil && unreachable.State == "firing", nil
	})
	rejected := find(alerts.Alerts, "CertapiServedCertificateRejected", names["untrusted"])
	if rejected.Labels["kind"] != "ValidatingWebhookConfiguration" || rejected.Labels["webhook"] != "untrusted.alerts.certapi.dev" ||
		rejected.Labels["state"] != "Untrusted" || rejected.Labels["severity"] != "critical" {
		t.Errorf("CertapiServedCertificateRejected labels %v", rejected.Labels)
	}
	if d := rejected.Annotations["description"]; !strings.Contains(d, "ValidatingWebhookConfiguration "+names["untrusted"]+" webhook untrusted.alerts.certapi.dev:") ||
		!strings.Contains(d, "kubectl certapi inspect validatingwebhookconfiguration/"+names["untrusted"]) {
		t.Errorf("CertapiServedCertificateRejected does not name the object from its labels: %s", d)
	}
	unreachable := find(alerts.Alerts, "CertapiServedCertificateUnreachable", names["closed"])
	if unreachable.Labels["severity"] != "info" || !strings.Contains(unreachable.Annotations["description"], "webhook closed.alerts.certapi.dev") ||
		!strings.Contains(unreachable.Annotations["description"], "not a trust failure") {
		t.Errorf("CertapiServedCertificateUnreachable: %v %v", unreachable.Labels, unreachable.Annotations)
	}
	// Nothing else of these alerts, in any state: not for the verified webhook, not Rejected for the
	// unreachable one, not Unreachable for the untrusted one, ExpiringSoon for none.
	for _, a := range alerts.Alerts {
		name := a.Labels["alertname"]
		if !strings.HasPrefix(name, "CertapiServedCertificate") {
			continue
		}
		want := (name == "CertapiServedCertificateRejected" && a.Labels["name"] == names["untrusted"]) ||
			(name == "CertapiServedCertificateUnreachable" && a.Labels["name"] == names["closed"])
		if !want {
			t.Errorf("%s is %s for %v", name, a.State, a.Labels)
		}
	}
	t.Logf("firing: %s: %s", rejected.Labels["alertname"], rejected.Annotations["description"])
	t.Logf("firing: %s: %s", unreachable.Labels["alertname"], unreachable.Annotations["description"])
}

// hostIP is an IPv4 address of this machine that an EndpointSlice may hold (kube-apiserver refuses
// loopback and link-local endpoint addresses).
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
	t.Fatalf("this machine has no IPv4 address but loopback and link-local ones (%v)", addrs)
	return ""
}

// serveTLS runs a TLS server on host presenting cert until the test ends, and returns its address. It
// answers nothing: the check sends no request.
func serveTLS(t *testing.T, host string, cert tls.Certificate) string {
	t.Helper()
	ln, err := tls.Listen("tcp", net.JoinHostPort(host, "0"), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = conn.Close() }()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				if err := conn.(*tls.Conn).Handshake(); err == nil {
					_, _ = io.Copy(io.Discard, conn)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// closedAddr is an address of host that nothing listens on.
func closedAddr(t *testing.T, host string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// certFromCertapi issues a certificate of certapi's CA for Service svc of ns through servingcerts.
func certFromCertapi(t *testing.T, c versioned.Interface, ns, svc string) tls.Certificate {
	t.Helper()
	scr := &certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Name: svc, Namespace: ns}, Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc}}
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), scr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := signertest.ECKey(t, elliptic.P256())
	var out *certapiv1alpha1.ServingCert
	testhelpers.Eventually(t, 500*time.Millisecond, time.Minute, "a certificate from servingcerts", func(ctx context.Context) (bool, error) {
		var err error
		out, err = c.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, svc,
			&certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: signertest.CSRPEM(t, key)}}, metav1.CreateOptions{})
		if apierrors.IsServiceUnavailable(err) {
			return false, nil
		}
		return err == nil, err
	})
	block, _ := pem.Decode([]byte(out.Status.Certificate))
	return tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: crypto.Signer(key)}
}

// certFromOtherCA signs a certificate for Service svc of ns with a CA certapi does not know.
func certFromOtherCA(t *testing.T, ca *signer.CA, ns, svc string) tls.Certificate {
	t.Helper()
	key := signertest.ECKey(t, elliptic.P256())
	leaf, err := ca.Sign(signer.LeafRequest{ServiceName: svc, Namespace: ns, ClusterDomain: signertest.ClusterDomain, PublicKey: key.Public(), Duration: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{leaf.Certificate.Raw}, PrivateKey: crypto.Signer(key)}
}

// selectorlessService makes Service svc of ns (port 443, https) and an EndpointSlice with one ready
// endpoint at addr, as the EndpointSlice controller would for a pod.
func selectorlessService(t *testing.T, kube kubernetes.Interface, ns, svc, addr string) {
	t.Helper()
	ctx := context.Background()
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portText)
	if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// opt creates a ValidatingWebhookConfiguration opted in to injection whose one webhook,
// <svc>.alerts.certapi.dev, calls Service svc of ns; its rules match nothing that exists and it fails
// open. It returns its name.
func opt(t *testing.T, kube kubernetes.Interface, ns, svc string) string {
	t.Helper()
	name := ns + "-" + svc
	_, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         svc + ".alerts.certapi.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svc}},
			Rules: []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{"alerts.certapi.dev"}, APIVersions: []string{"v1"}, Resources: []string{"nothings"}}}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return name
}
