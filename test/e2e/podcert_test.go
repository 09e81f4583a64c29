package e2e

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

const (
	pcrSigner  = certapiv1alpha1.PodCertificateSignerName
	ctbName    = "certapi.dev:serving:ca"
	pcrTimeout = 30 * time.Second
)

// podCert is one pod with a podCertificate volume on a node, its key, and its PodCertificateRequest once
// answered.
type podCert struct {
	pod *corev1.Pod
	key crypto.Signer
	pcr *certificatesv1.PodCertificateRequest
}

// certSource is a podCertificate source for certapi's signer naming request (no annotation when "").
func certSource(request, keyType string, maxExpiration *int32, extra map[string]string) corev1.PodCertificateProjection {
	ann := map[string]string{}
	if request != "" {
		ann[certapiv1alpha1.UserAnnotationServingCertRequest] = request
	}
	for k, v := range extra {
		ann[k] = v
	}
	return corev1.PodCertificateProjection{SignerName: pcrSigner, KeyType: keyType, MaxExpirationSeconds: maxExpiration, UserAnnotations: ann}
}

// podCertificate creates pod ns/name of ServiceAccount sa on node with a volume of source, then, as the
// node's kubelet, the PodCertificateRequest for it, and waits until it is answered.
func podCertificate(t *testing.T, node *framework.Node, ns, name, sa string, source corev1.PodCertificateProjection) *podCert {
	t.Helper()
	p := startPodCertificate(t, node, ns, name, sa, source)
	p.waitAnswered(t, node)
	return p
}

// waitAnswered waits until p's PodCertificateRequest is answered and keeps it in p.pcr.
func (p *podCert) waitAnswered(t *testing.T, node *framework.Node) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pcrTimeout)
	defer cancel()
	pcr, err := node.WaitPodCertificateRequest(ctx, p.pcr.Namespace, p.pcr.Name)
	if err != nil {
		t.Fatal(err)
	}
	p.pcr = pcr
}

// startPodCertificate is podCertificate without the wait: p.pcr is the request as created.
func startPodCertificate(t *testing.T, node *framework.Node, ns, name, sa string, source corev1.PodCertificateProjection) *podCert {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pcrTimeout)
	defer cancel()
	pod, err := node.CreatePod(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			ServiceAccountName: sa,
			Containers:         []corev1.Container{{Name: "server", Image: "registry.k8s.io/pause:3.10"}},
			Volumes:            []corev1.Volume{framework.PodCertificateVolume("tls", source, pcrSigner)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	key, err := framework.PodCertificateKey(source.KeyType)
	if err != nil {
		t.Fatal(err)
	}
	created, err := node.CreatePodCertificateRequest(ctx, pod, pod.Spec.Volumes[0].Projected.Sources[0].PodCertificate, key)
	if err != nil {
		t.Fatal(err)
	}
	return &podCert{pod: pod, key: key, pcr: created}
}

// condition returns pcr's terminal condition.
func (p *podCert) condition(t *testing.T) metav1.Condition {
	t.Helper()
	for _, c := range p.pcr.Status.Conditions {
		if c.Type == framework.PodCertificateRequestAnswered(p.pcr) {
			return c
		}
	}
	t.Fatalf("PodCertificateRequest %s has no terminal condition: %+v", p.pcr.Name, p.pcr.Status)
	return metav1.Condition{}
}

// trustBundle returns the ClusterTrustBundle certapi keeps, parsed.
func trustBundle(t *testing.T, kube kubernetes.Interface) (*certificatesv1.ClusterTrustBundle, *x509.CertPool) {
	t.Helper()
	var b *certificatesv1.ClusterTrustBundle
	e2etest.Eventually(t, 30*time.Second, "the ClusterTrustBundle "+ctbName, func(ctx context.Context) (bool, error) {
		var err error
		b, err = kube.CertificatesV1().ClusterTrustBundles().Get(ctx, ctbName, metav1.GetOptions{})
		return err == nil, nil
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(b.Spec.TrustBundle)) {
		t.Fatalf("the ClusterTrustBundle holds no certificate")
	}
	return b, pool
}

// verifyIssued checks an Issued PodCertificateRequest: the chain verifies for <svc>.<ns>.svc against
// roots (the ClusterTrustBundle), the leaf certifies the pod's key, its times are those of status, and
// its lifetime and beginRefreshAt are wantLifetime and notAfter - wantRefreshBefore.
func verifyIssued(t *testing.T, p *podCert, roots *x509.CertPool, svc string, wantLifetime, wantRefreshBefore time.Duration) *x509.Certificate {
	t.Helper()
	if c := p.condition(t); c.Type != certificatesv1.PodCertificateRequestConditionTypeIssued {
		t.Fatalf("PodCertificateRequest %s: %s %s: %s", p.pcr.Name, c.Type, c.Reason, c.Message)
	}
	st := p.pcr.Status
	block, rest := pem.Decode([]byte(st.CertificateChain))
	if block == nil || block.Type != "CERTIFICATE" {
		t.Fatalf("certificateChain does not start with a certificate")
	}
	if more, _ := pem.Decode(rest); more != nil {
		t.Errorf("certificateChain has more than the leaf; the CA is in the ClusterTrustBundle")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	dns := svc + "." + p.pod.Namespace + ".svc"
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: dns, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the leaf does not verify for %s against the ClusterTrustBundle: %v", dns, err)
	}
	if !leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(p.key.Public()) {
		t.Error("the leaf does not certify the key the node made")
	}
	if !leaf.NotBefore.Equal(st.NotBefore.Time) || !leaf.NotAfter.Equal(st.NotAfter.Time) {
		t.Errorf("status notBefore/notAfter %s/%s; the leaf's %s/%s", st.NotBefore, st.NotAfter, leaf.NotBefore, leaf.NotAfter)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != wantLifetime {
		t.Errorf("lifetime %s; want %s", got, wantLifetime)
	}
	if got := leaf.NotAfter.Sub(st.BeginRefreshAt.Time); got != wantRefreshBefore {
		t.Errorf("beginRefreshAt is %s before notAfter; want %s", got, wantRefreshBefore)
	}
	if skew := time.Since(leaf.NotBefore); skew < 0 || skew > 5*time.Minute {
		t.Errorf("notBefore %s is not within the 5 minutes before now that kube-apiserver allows", leaf.NotBefore)
	}
	return leaf
}

// TestPodCertificates plays a kubelet that mounts podCertificate volumes for certapi.dev/serving, against
// the real Node authorizer and NodeRestriction: the pods of an allowed ServiceAccount get the request's
// certificate for their own key, verifiable against the ClusterTrustBundle; a pod whose request does not
// exist yet waits for it; everything else is denied with the API's reasons or certapi's.
func TestPodCertificates(t *testing.T) {
	testhelpers.SkipUnlessServed(t, cp.AdminConfig, "certificates.k8s.io/v1", "podcertificaterequests")
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns, elsewhere := e2etest.Namespace(t, kube), e2etest.Namespace(t, kube)
	node, err := cp.NewNode(ctx, "pcr-node-"+ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	web := e2etest.Request("web", "web")
	web.Spec.DNSNames = []string{"*.web." + ns + ".svc"}
	web.Spec.RenewBefore = &metav1.Duration{Duration: 20 * time.Minute}
	web.Spec.ServiceAccountNames = []string{"web"}
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := e2etest.Request("other", "other")
	other.Spec.ServiceAccountNames = []string{"web"}
	if _, err := c.CertapiV1alpha1().ServingCertRequests(elsewhere).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, roots := trustBundle(t, kube)
	hour, day := int32(3600), int32(86400)

	t.Run("issued", func(t *testing.T) {
		p := podCertificate(t, node, ns, "web-0", "web", certSource("web", "ECDSAP256", &hour, nil))
		leaf := verifyIssued(t, p, roots, "web", time.Hour, 20*time.Minute)
		if want := []string{"web." + ns + ".svc", "web." + ns + ".svc.cluster.local", "*.web." + ns + ".svc"}; strings.Join(leaf.DNSNames, " ") != strings.Join(want, " ") {
			t.Errorf("SANs %q; want exactly the request's %q", leaf.DNSNames, want)
		}
		// The request's status shows the latest certificate, by any path, and an Event names the pod.
		serial := signer.FormatSerialNumber(leaf.SerialNumber)
		e2etest.Eventually(t, 10*time.Second, "the request's status to show the pod's certificate", func(ctx context.Context) (bool, error) {
			r, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "web", metav1.GetOptions{})
			return err == nil && r.Status.SerialNumber == serial, nil
		})
		waitEvent(t, kube, ns, "ServingCertRequest", "web", corev1.EventTypeNormal, "Issued", "web-0")
	})
	t.Run("RSA3072 with the default maxExpirationSeconds", func(t *testing.T) {
		p := podCertificate(t, node, ns, "web-1", "web", certSource("web", "RSA3072", nil, nil))
		if got := *p.pcr.Spec.MaxExpirationSeconds; got != day {
			t.Fatalf("kube-apiserver defaulted maxExpirationSeconds to %d", got)
		}
		verifyIssued(t, p, roots, "web", 24*time.Hour, 20*time.Minute)
	})

	for _, tc := range []struct {
		name, pod, sa, reason string
		source                corev1.PodCertificateProjection
		message               string
	}{
		{"a pod of another ServiceAccount", "intruder", "intruder", "ServiceAccountNotAllowed",
			certSource("web", "ECDSAP256", nil, nil), `"intruder"`},
		{"an unknown annotation", "tenant", "web", certificatesv1.PodCertificateRequestConditionInvalidUserConfig,
			certSource("web", "ECDSAP256", nil, map[string]string{"example.com/tenant": "a"}), `"example.com/tenant"`},
		{"no annotation", "anonymous", "web", certificatesv1.PodCertificateRequestConditionInvalidUserConfig,
			certSource("", "ECDSAP256", nil, nil), certapiv1alpha1.UserAnnotationServingCertRequest},
		{"an ED25519 key", "edwards", "web", certificatesv1.PodCertificateRequestConditionUnsupportedKeyType,
			certSource("web", "ED25519", nil, nil), "ECDSAP256, ECDSAP384, RSA3072, RSA4096"},
	} {
		t.Run("denied: "+tc.name, func(t *testing.T) {
			p := podCertificate(t, node, ns, tc.pod, tc.sa, tc.source)
			cond := p.condition(t)
			if cond.Type != certificatesv1.PodCertificateRequestConditionTypeDenied || cond.Reason != tc.reason || !strings.Contains(cond.Message, tc.message) {
				t.Errorf("got %s %s: %q; want Denied %s mentioning %q", cond.Type, cond.Reason, cond.Message, tc.reason, tc.message)
			}
			if p.pcr.Status.CertificateChain != "" {
				t.Error("a denied request holds a certificate")
			}
		})
	}
	// Denials are Warning Events: on the request when it exists.
	waitEvent(t, kube, ns, "ServingCertRequest", "web", corev1.EventTypeWarning, "Denied", "intruder")

	// A pod may come before its request (manifests applied in one go): its PodCertificateRequest stays
	// pending, with a Warning Event, and is issued once the request appears. A request of the same name
	// in another namespace does not count.
	t.Run("pending until its request exists", func(t *testing.T) {
		p := startPodCertificate(t, node, ns, "early", "web", certSource("other", "ECDSAP256", nil, nil))
		waitEvent(t, kube, ns, "PodCertificateRequest", p.pcr.Name, corev1.EventTypeWarning, "ServingCertRequestNotFound",
			`no ServingCertRequest "other" in namespace `+ns)
		pcr, err := kube.CertificatesV1().PodCertificateRequests(ns).Get(ctx, p.pcr.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if answered := framework.PodCertificateRequestAnswered(pcr); answered != "" {
			t.Fatalf("a PodCertificateRequest whose ServingCertRequest does not exist yet is %s; want it pending", answered)
		}
		late := e2etest.Request("other", "other")
		late.Spec.ServiceAccountNames = []string{"web"}
		late.Spec.RenewBefore = &metav1.Duration{Duration: 20 * time.Minute}
		if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, late, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p.waitAnswered(t, node)
		verifyIssued(t, p, roots, "other", 24*time.Hour, 20*time.Minute)
	})

	t.Run("kubelet cannot ask for a pod on another node", func(t *testing.T) {
		elsewhereNode, err := cp.NewNode(ctx, "pcr-other-"+ns)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = kube.CoreV1().Nodes().Delete(context.Background(), elsewhereNode.Name, metav1.DeleteOptions{})
		})
		pod, err := node.CreatePod(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-9"},
			Spec: corev1.PodSpec{ServiceAccountName: "web", Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
				Volumes: []corev1.Volume{framework.PodCertificateVolume("tls", certSource("web", "ECDSAP256", nil, nil), "")}},
		})
		if err != nil {
			t.Fatal(err)
		}
		key, err := framework.PodCertificateKey("ECDSAP256")
		if err != nil {
			t.Fatal(err)
		}
		// It keeps being refused (CreatePodCertificateRequest retries until its context ends).
		short, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err = elsewhereNode.CreatePodCertificateRequest(short, pod, pod.Spec.Volumes[0].Projected.Sources[0].PodCertificate, key)
		if !apierrors.IsForbidden(err) {
			t.Errorf("node %s made a PodCertificateRequest for a pod of node %s: %v", elsewhereNode.Name, node.Name, err)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		client, err := cp.CertapiHTTPClient()
		if err != nil {
			t.Fatal(err)
		}
		want := []string{`certapi_issuances_total{path="pcr",result="issued"}`, `certapi_issuances_total{path="pcr",result="denied"}`,
			`certapi_issuance_duration_seconds_bucket{path="pcr"`}
		e2etest.Eventually(t, 10*time.Second, "the pcr metrics", func(ctx context.Context) (bool, error) {
			resp, err := client.Get(cp.CertapiURL + "/metrics")
			if err != nil {
				return false, nil
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			for _, w := range want {
				if !strings.Contains(string(body), w) {
					return false, nil
				}
			}
			return true, nil
		})
	})
}

// waitEvent waits for an Event of eventType and reason regarding kind/name in ns whose note mentions
// text.
func waitEvent(t *testing.T, kube kubernetes.Interface, ns, kind, name, eventType, reason, text string) {
	t.Helper()
	e2etest.Eventually(t, 30*time.Second, fmt.Sprintf("a %s Event %s on %s %s mentioning %q", eventType, reason, kind, name, text), func(ctx context.Context) (bool, error) {
		evs, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == kind && e.Regarding.Name == name && e.Type == eventType && e.Reason == reason && strings.Contains(e.Note, text) {
				return true, nil
			}
		}
		return false, nil
	})
}

// TestPodCertificatesThroughRotation: a forced rotation puts the Next CA into the ClusterTrustBundle and
// into annotated ConfigMaps before it signs (the gate waits for both: while either cannot be written, the
// Next CA does not sign), and then pods get certificates from it that verify against the bundle they
// mount.
func TestPodCertificatesThroughRotation(t *testing.T) {
	testhelpers.SkipUnlessServed(t, cp.AdminConfig, "certificates.k8s.io/v1", "podcertificaterequests")
	ctx := context.Background()
	// A long --max-certificate-duration: a pod certificate must last an hour.
	own := framework.StartT(t, framework.Options{CertapiArgs: []string{"--rotation-grace=2s"}})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	node, err := own.NewNode(ctx, "rotation-node")
	if err != nil {
		t.Fatal(err)
	}
	req := e2etest.Request("web", "web")
	req.Spec.ServiceAccountNames = []string{"web"}
	req.Spec.RenewBefore = &metav1.Duration{Duration: 8 * time.Hour}
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gated", Annotations: map[string]string{"certapi.dev/inject-ca-bundle": "true"}}}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	old := e2etest.ActiveSerial(t, own)
	holds := func(ctx context.Context, serial string) (ctb, configMap bool) {
		b, err := kube.CertificatesV1().ClusterTrustBundles().Get(ctx, ctbName, metav1.GetOptions{})
		ctb = err == nil && bundleHas(b.Spec.TrustBundle, serial)
		m, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "gated", metav1.GetOptions{})
		configMap = err == nil && bundleHas(m.Data["ca.crt"], serial)
		return ctb, configMap
	}
	e2etest.Eventually(t, 30*time.Second, "the ClusterTrustBundle and the ConfigMap to hold the Active CA", func(ctx context.Context) (bool, error) {
		a, b := holds(ctx, old)
		return a && b, nil
	})
	before := podCertificate(t, node, ns, "web-0", "web", certSource("web", "ECDSAP256", nil, nil))
	_, roots := trustBundle(t, kube)
	verifyIssued(t, before, roots, "web", 24*time.Hour, 8*time.Hour)

	// Nobody may update the ClusterTrustBundle or the ConfigMap: kube-apiserver refuses certapi's writes.
	unblock := blockUpdates(t, kube, ns)
	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.ForceRotation = "pcr-1" })
	var next string
	e2etest.Eventually(t, 30*time.Second, "the Next CA published", func(context.Context) (bool, error) {
		for _, cert := range e2etest.CAObject(t, c).Status.Certificates {
			if cert.Role == certapiv1alpha1.CARoleNext {
				next = cert.SerialNumber
			}
		}
		return next != "", nil
	})
	// The gate stays closed past the grace period while they cannot take the bundle.
	stays(t, 6*time.Second, "the Next CA signs while the ClusterTrustBundle and the ConfigMap lack it", func(ctx context.Context) bool {
		return e2etest.CAObject(t, c).Status.Active.SerialNumber != old
	})
	if a, b := holds(ctx, next); a || b {
		t.Fatalf("the blocked targets hold the Next CA (ClusterTrustBundle %v, ConfigMap %v)", a, b)
	}
	unblock()
	// Once they can, they take it, and only then does it sign.
	e2etest.Eventually(t, 30*time.Second, "the switch", func(ctx context.Context) (bool, error) {
		return e2etest.CAObject(t, c).Status.Active.SerialNumber == next, nil
	})
	if a, b := holds(ctx, next); !a || !b {
		t.Fatalf("the Next CA signs but the ClusterTrustBundle (%v) or the ConfigMap (%v) lacks it", a, b)
	}
	after := podCertificate(t, node, ns, "web-1", "web", certSource("web", "ECDSAP256", nil, nil))
	_, roots = trustBundle(t, kube)
	verifyIssued(t, after, roots, "web", 24*time.Hour, 8*time.Hour)
	if got := e2etest.IssuerSerialOf(t, after.pcr.Status.CertificateChain, e2etest.CAObject(t, c).Status.CABundle); got != next {
		t.Errorf("a pod certificate after the switch is from %s, want %s", got, next)
	}
	// The pod certificate from before the switch still verifies: the old CA is Retiring, still trusted.
	verifyIssued(t, before, roots, "web", 24*time.Hour, 8*time.Hour)
}

// bundleHas reports whether the PEM bundle holds the CA with serial.
func bundleHas(bundle, serial string) bool {
	certs, err := signer.ParseBundle([]byte(bundle))
	if err != nil {
		return false
	}
	for _, c := range certs {
		if signer.FormatSerialNumber(c.SerialNumber) == serial {
			return true
		}
	}
	return false
}

// blockUpdates makes kube-apiserver refuse every update of ClusterTrustBundles and of ConfigMap ns/gated,
// with a ValidatingAdmissionPolicy, and returns once it does; the returned function lifts it.
func blockUpdates(t *testing.T, kube kubernetes.Interface, ns string) func() {
	t.Helper()
	ctx := context.Background()
	name := "pcr-block-" + ns
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptrTo(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
				{RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"certificates.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"clustertrustbundles"}}}},
				{RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf("!(request.resource.resource == 'clustertrustbundles' || (request.namespace == '%s' && object.metadata.name == 'gated'))", ns),
				Message:    "blocked by the test",
			}},
		},
	}
	vap := kube.AdmissionregistrationV1().ValidatingAdmissionPolicies()
	if _, err := vap.Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	bindings := kube.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if _, err := bindings.Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lift := func() {
		_ = bindings.Delete(context.Background(), name, metav1.DeleteOptions{})
		_ = vap.Delete(context.Background(), name, metav1.DeleteOptions{})
	}
	t.Cleanup(lift)
	// kube-apiserver enforces a policy once its informer has it: probe with dry-run updates until both are refused.
	e2etest.Eventually(t, 30*time.Second, "the policy to refuse updates", func(ctx context.Context) (bool, error) {
		b, err := kube.CertificatesV1().ClusterTrustBundles().Get(ctx, ctbName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		b.Labels = map[string]string{"probe": "1"}
		_, errB := kube.CertificatesV1().ClusterTrustBundles().Update(ctx, b, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		m, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "gated", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		m.Labels = map[string]string{"probe": "1"}
		_, errM := kube.CoreV1().ConfigMaps(ns).Update(ctx, m, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsInvalid(errB) && apierrors.IsInvalid(errM), nil
	})
	return func() {
		lift()
		e2etest.Eventually(t, 30*time.Second, "the policy to be lifted", func(ctx context.Context) (bool, error) {
			m, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "gated", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			m.Labels = map[string]string{"probe": "1"}
			_, err = kube.CoreV1().ConfigMaps(ns).Update(ctx, m, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil, nil
		})
	}
}

// stays checks that cond stays false for d (polling every 100 ms), for "the gate stays closed": a
// negative check bounded by a deadline.
func stays(t *testing.T, d time.Duration, what string, cond func(ctx context.Context) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, d, true, func(ctx context.Context) (bool, error) {
		return cond(ctx), nil
	})
	if err == nil {
		t.Fatalf("%s (within %s)", what, d)
	}
	if !wait.Interrupted(err) {
		t.Fatalf("checking that %s does not happen: %v", what, err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestPodCertificatesFromKubeletsManager runs kubelet's own podcertificate manager
// (k8s.io/kubernetes/pkg/kubelet/podcertificate, in hack/tools' podcertnode) for a node, instead of
// imitating it: it sees a pod bound to its node, makes the key and the PodCertificateRequest itself, and
// hands the volume host a credential bundle whose certificate, from certapi, certifies its key and
// verifies against the ClusterTrustBundle; a key type certapi does not sign ends as kubelet's "denied".
func TestPodCertificatesFromKubeletsManager(t *testing.T) {
	testhelpers.SkipUnlessServed(t, cp.AdminConfig, "certificates.k8s.io/v1", "podcertificaterequests")
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	node, err := cp.NewNode(ctx, "kubelet-"+ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	kubelet, err := node.StartKubelet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := kubelet.Stop(10 * time.Second); err != nil {
			t.Errorf("stopping podcertnode: %v", err)
		}
	})
	req := e2etest.Request("web", "web")
	req.Spec.RenewBefore = &metav1.Duration{Duration: 20 * time.Minute}
	req.Spec.ServiceAccountNames = []string{"web"}
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, roots := trustBundle(t, kube)
	mount := func(name, keyType string) (*corev1.Pod, []byte, string) {
		t.Helper()
		hour := int32(3600)
		pod, err := node.CreatePod(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{
				ServiceAccountName: "web",
				Containers:         []corev1.Container{{Name: "server", Image: "registry.k8s.io/pause:3.10"}},
				Volumes:            []corev1.Volume{framework.PodCertificateVolume("tls", certSource("web", keyType, &hour, nil), pcrSigner)},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		var bundle []byte
		var why string
		e2etest.Eventually(t, pcrTimeout, "kubelet's manager to fill the volume of "+name, func(context.Context) (bool, error) {
			bundle, why = kubelet.Volume(pod, "tls", 0)
			return bundle != nil || strings.Contains(why, "permanently"), nil
		})
		return pod, bundle, why
	}

	_, bundle, why := mount("web-0", "ECDSAP256")
	if bundle == nil {
		t.Fatalf("no credential bundle: %s", why)
	}
	keyBlock, rest := pem.Decode(bundle)
	if keyBlock == nil || keyBlock.Type != "PRIVATE KEY" {
		t.Fatal("the credential bundle does not start with a PRIVATE KEY block")
	}
	key, err := x509.ParsePKCS8PrivateKey(keyBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	certBlock, _ := pem.Decode(rest)
	if certBlock == nil || certBlock.Type != "CERTIFICATE" {
		t.Fatal("no certificate after the key in the credential bundle")
	}
	leaf, err := x509.ParseCertificate(certBlock.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	dns := "web." + ns + ".svc"
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: dns, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the certificate kubelet got does not verify for %s against the ClusterTrustBundle: %v", dns, err)
	}
	if !leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(key.(crypto.Signer).Public()) {
		t.Error("the certificate does not certify the key kubelet made")
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != time.Hour {
		t.Errorf("lifetime %s; want the volume's maxExpirationSeconds, 1h", got)
	}

	_, bundle, why = mount("edwards", "ED25519")
	if bundle != nil || !strings.Contains(why, `reason="UnsupportedKeyType"`) || !strings.Contains(why, "ECDSAP256, ECDSAP384, RSA3072, RSA4096") {
		t.Errorf("an ED25519 volume: bundle of %d bytes, %q; want kubelet's permanent denial for UnsupportedKeyType", len(bundle), why)
	}
}
