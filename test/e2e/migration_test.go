package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// The cut-over of docs/migration.md, run under admission traffic: a webhook whose certificate and
// caBundle another tool keeps (here a stand-in for cert-manager + cainjector: a CA of its own, the
// webhook's certificate from it, annotation cert-manager.io/inject-ca-from and the CA in caBundle,
// written under cainjector's field manager) moves to certapi's CA with no failed call.

// oldIssuer is the other tool's CA, made in the test.
type oldIssuer struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newOldIssuer(t *testing.T) *oldIssuer {
	t.Helper()
	key := signertest.ECKey(t, elliptic.P256())
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "cert-manager-webhook-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &oldIssuer{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// serving issues the webhook's serving certificate for dnsName, as cert-manager's CA Issuer would.
func (o *oldIssuer) serving(t *testing.T, dnsName string) *tls.Certificate {
	t.Helper()
	key := signertest.ECKey(t, elliptic.P256())
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: dnsName},
		DNSNames:     []string{dnsName},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, o.cert, key.Public(), o.key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// switchableWebhook is an HTTPS admission webhook whose serving certificate can be swapped, as a
// rollout of the webhook's pods would; keep-alives are off, so every call is a fresh TLS handshake
// that kube-apiserver verifies against the caBundle of that moment.
type switchableWebhook struct {
	port    int32
	cert    atomic.Pointer[tls.Certificate]
	fromNew atomic.Bool
	// handshakesNew counts handshakes served with the certificate from certapi's CA.
	handshakesNew atomic.Int64
}

func startSwitchableWebhook(t *testing.T, kube kubernetes.Interface, ns, svc string, initial *tls.Certificate) *switchableWebhook {
	t.Helper()
	w := &switchableWebhook{}
	w.cert.Store(initial)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if w.fromNew.Load() {
				w.handshakesNew.Add(1)
			}
			return w.cert.Load(), nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.port = int32(ln.Addr().(*net.TCPAddr).Port)
	srv := &http.Server{Handler: admissionHandler(t), ReadHeaderTimeout: 10 * time.Second}
	srv.SetKeepAlivesEnabled(false)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	if _, err := kube.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: w.port}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// annotate merge-patches the webhook configuration's annotations (a nil value removes one), as
// `kubectl annotate` does.
func annotate(t *testing.T, kube kubernetes.Interface, name string, annotations map[string]*string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(context.Background(), name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-annotate"}); err != nil {
		t.Fatalf("annotating %s: %v", name, err)
	}
}

// injectorEvent returns the note of the injector's Event of reason about the webhook configuration
// name, "" when there is none yet.
func injectorEvent(ctx context.Context, kube kubernetes.Interface, name, reason string) string {
	evs, err := kube.EventsV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return ""
	}
	for _, ev := range evs.Items {
		if ev.Regarding.Kind == string(injector.KindValidatingWebhookConfiguration) && ev.Regarding.Name == name && ev.Reason == reason {
			return ev.Note
		}
	}
	return ""
}

// standInCertificate creates cert-manager's Certificate API (a stand-in CRD: group cert-manager.io,
// version v1, any spec) if it is not there, and a Certificate for the webhook's Service, as the cluster
// being migrated has them.
func standInCertificate(t *testing.T, ns, name, svc, secret string) {
	t.Helper()
	ext, err := apiextensionsclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "certificates.cert-manager.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "cert-manager.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "certificates", Singular: "certificate", Kind: "Certificate", ListKind: "CertificateList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}
	cert := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{"secretName": secret, "dnsNames": []any{svc + "." + ns + ".svc", svc + "." + ns + ".svc.cluster.local"},
			"issuerRef": map[string]any{"name": "webhook-ca", "kind": "Issuer"}},
	}}
	certs := dyn.Resource(schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}).Namespace(ns)
	// Retried: the CRD may be new (not established yet) or, from an earlier run, still being deleted.
	e2etest.Eventually(t, 60*time.Second, "cert-manager's Certificate API and a Certificate", func(ctx context.Context) (bool, error) {
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
		_, err := certs.Create(ctx, cert, metav1.CreateOptions{})
		return err == nil, nil
	})
	t.Cleanup(func() {
		_ = ext.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
}

func TestMigrationFromCAInjectorFailsNoCall(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	const svc = "legacy"
	dnsName := svc + "." + ns + ".svc"
	old := newOldIssuer(t)
	w := startSwitchableWebhook(t, kube, ns, svc, old.serving(t, dnsName))

	// The webhook configuration as cert-manager leaves it: annotated inject-ca-from, the old CA in
	// caBundle, written by cainjector's field manager.
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	path := "/validate"
	name := "certapi-e2e-migration-" + ns
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"cert-manager.io/inject-ca-from": ns + "/" + svc}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "configmaps.migration.certapi.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svc, Path: &path, Port: &w.port}, CABundle: old.pem},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{FieldManager: "cert-manager-cainjector"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	caBundle := func(ctx context.Context) []byte {
		got, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return got.Webhooks[0].ClientConfig.CABundle
	}
	e2etest.Eventually(t, 30*time.Second, "the webhook to answer through kube-apiserver with the old CA", func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("warm-%d", time.Now().UnixNano())), metav1.CreateOptions{})
		return err == nil, nil
	})
	// The plan `kubectl certapi migrate` prints for this cluster has the steps this test runs.
	standInCertificate(t, ns, svc, svc, svc+"-tls")
	run := newPluginRunnerFor(t, buildPluginNamed(t, "kubectl-certapi"), cp.Kubeconfig).kubectl
	plan := run("certapi", "migrate").succeeded(t).stdout
	for _, want := range []string{
		fmt.Sprintf("kubectl create servingcertrequest %s -n %s --service=%s --secret=%s-tls-certapi --wait\n", svc, ns, svc, svc),
		fmt.Sprintf("kubectl annotate validatingwebhookconfiguration %s certapi.dev/inject-ca-bundle=true certapi.dev/keep-foreign-ca=true\n", name),
		fmt.Sprintf("kubectl annotate validatingwebhookconfiguration %s cert-manager.io/inject-ca-from-\n", name),
		fmt.Sprintf("kubectl certapi inspect validatingwebhookconfiguration/%s\n", name),
		fmt.Sprintf("kubectl annotate validatingwebhookconfiguration %s certapi.dev/keep-foreign-ca-\n", name),
		fmt.Sprintf("kubectl delete certificate %s -n %s\n", svc, ns),
	} {
		if !strings.Contains(plan, want) {
			t.Fatalf("kubectl certapi migrate does not print %q:\n%s", want, plan)
		}
	}

	// Step 1 of the guide: the ServingCertRequest for the webhook's Service.
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request(svc, svc), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Admission traffic through kube-apiserver for the whole cut-over: each call creates a ConfigMap
	// the webhook must admit (failurePolicy Fail: a failed handshake fails the call).
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var calls, failures int
	var firstFailure error
	for g := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("m-"+strconv.Itoa(g)+"-"+strconv.Itoa(i)), metav1.CreateOptions{})
				cancel()
				mu.Lock()
				calls++
				if err != nil {
					failures++
					if firstFailure == nil {
						firstFailure = err
					}
				}
				mu.Unlock()
			}
		}()
	}
	stopped := false
	stopTraffic := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(stopTraffic)
	callsNow := func() int {
		mu.Lock()
		defer mu.Unlock()
		return calls
	}
	moreCalls := func(what string, n int) {
		t.Helper()
		from := callsNow()
		e2etest.Eventually(t, 30*time.Second, fmt.Sprintf("%d more calls %s", n, what), func(context.Context) (bool, error) {
			return callsNow() >= from+n, nil
		})
	}
	moreCalls("with the old CA alone", 10)

	// Step 2: certapi's annotations, both at once, while cert-manager's is still there: certapi does
	// not fight the other injector (ClaimedByAnotherInjector, no write).
	annotate(t, kube, name, map[string]*string{
		certapiv1alpha1.AnnotationInjectCABundle: ptrTo("true"),
		certapiv1alpha1.AnnotationKeepForeignCA:  ptrTo("true"),
	})
	e2etest.Eventually(t, 30*time.Second, "a ClaimedByAnotherInjector Event naming cert-manager's annotation", func(ctx context.Context) (bool, error) {
		return strings.Contains(injectorEvent(ctx, kube, name, injector.ReasonClaimedByAnotherInjector), "cert-manager.io/inject-ca-from"), nil
	})
	moreCalls("with both tools' annotations", 10)
	got, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, old.pem) {
		t.Fatal("certapi wrote the caBundle of a webhook configuration that cert-manager's annotation still claims")
	}
	for _, m := range got.ManagedFields {
		if m.Manager == certapiv1alpha1.FieldManager {
			t.Fatalf("certapi has a managedFields entry on a configuration it must leave alone: %+v", m)
		}
	}

	// Step 3: remove cert-manager's annotation; certapi writes its bundle followed by the old CA.
	annotate(t, kube, name, map[string]*string{"cert-manager.io/inject-ca-from": nil})
	var certapiBundle []byte
	e2etest.Eventually(t, 30*time.Second, "the caBundle to hold certapi's bundle and the old CA", func(ctx context.Context) (bool, error) {
		certapiBundle = []byte(e2etest.CAObject(t, c).Status.CABundle)
		return bytes.Equal(caBundle(ctx), append(append([]byte(nil), certapiBundle...), old.pem...)), nil
	})
	e2etest.Eventually(t, 30*time.Second, "a KeepingForeignCA Event naming the old CA", func(ctx context.Context) (bool, error) {
		note := injectorEvent(ctx, kube, name, injector.ReasonKeepingForeignCA)
		if strings.Contains(note, "BEGIN") {
			t.Fatalf("the Event carries PEM: %q", note)
		}
		return strings.Contains(note, "cert-manager-webhook-ca"), nil
	})
	moreCalls("with both CAs trusted", 10)
	// certapi's served certificate check verifies the server against what the object holds, the kept CA
	// included: the endpoint counts under the old CA's serial.
	endpoint := fmt.Sprintf("ValidatingWebhookConfiguration %s webhook configmaps.migration.certapi.test: localhost:%d", name, w.port)
	servedBy := func(ctx context.Context) (string, error) {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil || ca.Status.Served == nil {
			return "", err
		}
		for _, i := range ca.Status.Served.Issuers {
			if slices.Contains(i.Names, endpoint) {
				return i.SerialNumber, nil
			}
		}
		return "", nil
	}
	oldSerial := signer.FormatSerialNumber(old.cert.SerialNumber)
	e2etest.Eventually(t, 30*time.Second, "status.served.issuers naming the endpoint under the old CA", func(ctx context.Context) (bool, error) {
		serial, err := servedBy(ctx)
		return serial == oldSerial, err
	})

	// Step 4: the webhook moves to a certificate from certapi's CA (the servingcerts subresource; a
	// rollout that mounts a delivered Secret does the same).
	key := signertest.ECKey(t, elliptic.P256())
	issued := issue(t, ns, svc, e2etest.ServingCert(signertest.CSRPEM(t, key), nil))
	block, _ := pem.Decode([]byte(issued.Status.Certificate))
	if block == nil {
		t.Fatal("servingcerts returned no certificate")
	}
	w.fromNew.Store(true)
	w.cert.Store(&tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: key})
	e2etest.Eventually(t, 30*time.Second, "10 handshakes served with the certificate from certapi's CA", func(context.Context) (bool, error) {
		return w.handshakesNew.Load() >= 10, nil
	})
	// The guide's signal that step 5 is safe: the check sees the endpoint serve certapi's certificate.
	active := e2etest.ActiveSerial(t, cp)
	e2etest.Eventually(t, 30*time.Second, "status.served.issuers naming the endpoint under certapi's Active CA", func(ctx context.Context) (bool, error) {
		serial, err := servedBy(ctx)
		return serial == active, err
	})
	// And the plan's inspect says so (--direct: the server is this process, behind an ExternalName Service).
	inspected := run("certapi", "inspect", "validatingwebhookconfiguration/"+name, "--direct").succeeded(t).stdout
	if want := "verified by the caBundle's CA " + active; !strings.Contains(inspected, want) {
		t.Errorf("kubectl certapi inspect does not say %q:\n%s", want, inspected)
	}

	// Step 5: remove the keep annotation; certapi drops the old CA.
	annotate(t, kube, name, map[string]*string{certapiv1alpha1.AnnotationKeepForeignCA: nil})
	e2etest.Eventually(t, 30*time.Second, "the caBundle to hold certapi's bundle alone", func(ctx context.Context) (bool, error) {
		certapiBundle = []byte(e2etest.CAObject(t, c).Status.CABundle)
		return bytes.Equal(caBundle(ctx), certapiBundle), nil
	})
	moreCalls("with certapi's CA alone", 20)
	stopTraffic()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("calls during the cut-over: %d, failed: %d", calls, failures)
	if failures > 0 {
		t.Fatalf("%d of %d calls failed during the cut-over; first: %v", failures, calls, firstFailure)
	}
	// The old CA is no longer trusted: a server still on it would now fail, so the test could fail.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caBundle(ctx))
	oldLeaf, err := x509.ParseCertificate(old.serving(t, dnsName).Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oldLeaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: dnsName}); err == nil {
		t.Fatal("the final caBundle still trusts the old CA")
	}
}
