package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/servingcert"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// webhookServer is a real HTTPS webhook process (in the test binary) whose serving certificate comes
// from certapi through pkg/servingcert, reached by kube-apiserver through an ExternalName Service.
type webhookServer struct {
	ns, svc string
	port    int32
	source  *servingcert.Source
	// handshakes counts TLS handshakes served, so tests can see kube-apiserver really called.
	calls atomic.Int64
}

// startWebhook creates the ServingCertRequest and the ExternalName Service, starts the library and an
// HTTPS server with mux, and stops both when the test ends.
func startWebhook(t *testing.T, own *framework.ControlPlane, ns, svc string, mux *http.ServeMux) *webhookServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request(svc, svc), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src, err := servingcert.New(servingcert.Options{Client: c, Namespace: ns, Name: svc})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = src.Start(ctx) }()
	if err := src.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", src.TLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	w := &webhookServer{ns: ns, svc: svc, port: int32(ln.Addr().(*net.TCPAddr).Port), source: src}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.calls.Add(1)
		mux.ServeHTTP(rw, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: w.port}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return w
}

// admissionHandler denies ConfigMaps whose name starts with "deny-".
func admissionHandler(t *testing.T) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/validate", func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
		if strings.HasPrefix(review.Request.Name, "deny-") {
			resp.Allowed = false
			resp.Result = &metav1.Status{Message: "denied by the certapi test webhook"}
		}
		review.Response = resp
		_ = json.NewEncoder(w).Encode(review)
	})
	return mux
}

// registerValidatingWebhook creates an annotated ValidatingWebhookConfiguration with no caBundle,
// failurePolicy Fail, for ConfigMaps in ns only, and waits for certapi to inject it.
func registerValidatingWebhook(t *testing.T, kube kubernetes.Interface, w *webhookServer) string {
	t.Helper()
	ctx := context.Background()
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	path := "/validate"
	name := "certapi-e2e-" + w.ns
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"certapi.dev/inject-ca-bundle": "true"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "configmaps.certapi.test",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: w.ns, Name: w.svc, Path: &path, Port: &w.port}},
			Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": w.ns}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	e2etest.Eventually(t, 10*time.Second, "certapi to inject the webhook's caBundle", func(ctx context.Context) (bool, error) {
		got, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		return err == nil && len(got.Webhooks[0].ClientConfig.CABundle) > 0, nil
	})
	return name
}

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func TestAdmissionWebhookTrustedThroughInjection(t *testing.T) {
	ctx := context.Background()
	_, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	w := startWebhook(t, cp, ns, "guard", admissionHandler(t))
	registerValidatingWebhook(t, kube, w)

	// The webhook is called and its decision enforced: allowed is created, denied is refused with its message.
	e2etest.Eventually(t, 30*time.Second, "an allowed ConfigMap to be created through the webhook", func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("allow-%d", time.Now().UnixNano())), metav1.CreateOptions{})
		return err == nil, nil
	})
	_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("deny-me"), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "denied by the certapi test webhook") {
		t.Fatalf("a ConfigMap the webhook denies: %v, want the webhook's denial", err)
	}
	if w.calls.Load() == 0 {
		t.Fatal("kube-apiserver never called the webhook")
	}
}

// TestCertapiAPIServiceSelfInjected checks certapi's own registration: Available, with the caBundle
// certapi injected (its CA bundle), and no insecureSkipTLSVerify.
func TestCertapiAPIServiceSelfInjected(t *testing.T) {
	ctx := context.Background()
	c, _ := testhelpers.Clients(t, cp.AdminConfig)
	agg := aggregatorClient(t, cp)
	svc, err := agg.ApiregistrationV1().APIServices().Get(ctx, framework.CertapiAPIService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.InsecureSkipTLSVerify {
		t.Fatal("certapi's APIService skips TLS verification")
	}
	ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(svc.Spec.CABundle) != ca.Status.CABundle {
		t.Fatal("certapi's APIService caBundle is not certapi's CA bundle")
	}
	var byCertapi bool
	for _, m := range svc.ManagedFields {
		byCertapi = byCertapi || (m.Manager == "certapi" && strings.Contains(string(m.FieldsV1.Raw), "caBundle"))
	}
	if !byCertapi {
		t.Error("the caBundle's managedFields entry does not name manager certapi")
	}
	for _, cond := range svc.Status.Conditions {
		if cond.Type == "Available" && cond.Status != "True" {
			t.Fatalf("certapi's APIService is not Available: %s", cond.Message)
		}
	}
}

// conversionHandler converts between v1 (spec.value) and v2 (spec.data) of widgets.certapi.test.
func conversionHandler() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/convert", func(w http.ResponseWriter, r *http.Request) {
		var review apiextensionsv1.ConversionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "bad review", http.StatusBadRequest)
			return
		}
		resp := &apiextensionsv1.ConversionResponse{UID: review.Request.UID, Result: metav1.Status{Status: metav1.StatusSuccess}}
		for _, raw := range review.Request.Objects {
			var obj unstructured.Unstructured
			if err := obj.UnmarshalJSON(raw.Raw); err != nil {
				resp.Result = metav1.Status{Status: metav1.StatusFailure, Message: err.Error()}
				break
			}
			spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
			out := map[string]any{}
			switch review.Request.DesiredAPIVersion {
			case "certapi.test/v2":
				out["data"] = spec["value"]
			default:
				out["value"] = spec["data"]
			}
			obj.Object["spec"] = out
			obj.SetAPIVersion(review.Request.DesiredAPIVersion)
			b, _ := obj.MarshalJSON()
			resp.ConvertedObjects = append(resp.ConvertedObjects, runtime.RawExtension{Raw: b})
		}
		review.Response = resp
		_ = json.NewEncoder(w).Encode(review)
	})
	return mux
}

func TestCRDConversionWebhook(t *testing.T) {
	ctx := context.Background()
	_, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	w := startWebhook(t, cp, ns, "converter", conversionHandler())
	ext, err := apiextensionsclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	path := "/convert"
	schemaFor := func(field string) *apiextensionsv1.CustomResourceValidation {
		return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{field: {Type: "string"}}},
			}}}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.certapi.test", Annotations: map[string]string{"certapi.dev/inject-ca-bundle": "true"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "certapi.test",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: true, Schema: schemaFor("value")},
				{Name: "v2", Served: true, Storage: false, Schema: schemaFor("data")},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{
				Strategy: apiextensionsv1.WebhookConverter,
				Webhook: &apiextensionsv1.WebhookConversion{
					ClientConfig:             &apiextensionsv1.WebhookClientConfig{Service: &apiextensionsv1.ServiceReference{Namespace: ns, Name: w.svc, Path: &path, Port: &w.port}},
					ConversionReviewVersions: []string{"v1"},
				},
			},
		},
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ext.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	e2etest.Eventually(t, 30*time.Second, "the CRD to be established with an injected conversion caBundle", func(ctx context.Context) (bool, error) {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		established := false
		for _, c := range got.Status.Conditions {
			established = established || (c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue)
		}
		return established && len(got.Spec.Conversion.Webhook.ClientConfig.CABundle) > 0, nil
	})

	dyn, err := dynamic.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	v1 := dyn.Resource(schema.GroupVersionResource{Group: "certapi.test", Version: "v1", Resource: "widgets"}).Namespace(ns)
	v2 := dyn.Resource(schema.GroupVersionResource{Group: "certapi.test", Version: "v2", Resource: "widgets"}).Namespace(ns)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "certapi.test/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1"}, "spec": map[string]any{"value": "hello"},
	}}
	e2etest.Eventually(t, 30*time.Second, "a v1 Widget to be created", func(ctx context.Context) (bool, error) {
		_, err := v1.Create(ctx, obj, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
	var got *unstructured.Unstructured
	e2etest.Eventually(t, 30*time.Second, "the Widget read as v2 through the conversion webhook", func(ctx context.Context) (bool, error) {
		got, err = v2.Get(ctx, "w1", metav1.GetOptions{})
		return err == nil, nil
	})
	if data, _, _ := unstructured.NestedString(got.Object, "spec", "data"); data != "hello" {
		t.Fatalf("v2 spec.data = %q, want the v1 spec.value converted by the webhook", data)
	}
	// And back: written as v2, read as v1.
	obj2 := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "certapi.test/v2", "kind": "Widget",
		"metadata": map[string]any{"name": "w2"}, "spec": map[string]any{"data": "world"},
	}}
	if _, err := v2.Create(ctx, obj2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	back, err := v1.Get(ctx, "w2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if value, _, _ := unstructured.NestedString(back.Object, "spec", "value"); value != "world" {
		t.Fatalf("v1 spec.value = %q, want %q", value, "world")
	}
}

// TestZeroFailureRotation calls a real admission webhook and certapi's own API every 100 ms while a
// forced CA rotation runs to its end: every call succeeds, both serving certificates move to the new
// CA, and the old CA leaves every bundle. No process restarts.
func TestZeroFailureRotation(t *testing.T) {
	own := rotationPlane(t)
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	w := startWebhook(t, own, ns, "guard", admissionHandler(t))
	vwc := registerValidatingWebhook(t, kube, w)
	old := e2etest.ActiveSerial(t, own)
	e2etest.Eventually(t, 30*time.Second, "the webhook to answer through kube-apiserver", func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("warm-%d", time.Now().UnixNano())), metav1.CreateOptions{})
		return err == nil, nil
	})

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var calls, failures int
	var firstFailure error
	record := func(what string, err error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if err != nil {
			failures++
			// Each failure is logged when it happens, with the phase the CA was in, so a failure in CI
			// can be placed against certapi's log lines.
			t.Logf("%s: call to %s failed: %v", time.Now().Format("15:04:05.000"), what, err)
			if firstFailure == nil {
				firstFailure = fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	loop := func(what string, call func(ctx context.Context, i int) error) {
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
				record(what, call(ctx, i))
				cancel()
			}
		}()
	}
	loop("the webhook (ConfigMap create)", func(ctx context.Context, i int) error {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("r-"+strconv.Itoa(i)), metav1.CreateOptions{})
		return err
	})
	loop("certapi (ServingCertRequest list)", func(ctx context.Context, i int) error {
		_, err := c.CertapiV1alpha1().ServingCertRequests(ns).List(ctx, metav1.ListOptions{})
		return err
	})

	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.ForceRotation = "zero-failure" })
	var newSerial string
	t.Logf("%s: forced rotation requested", time.Now().Format("15:04:05.000"))
	e2etest.Eventually(t, 60*time.Second, "the switch to the new CA", func(context.Context) (bool, error) {
		newSerial = e2etest.CAObject(t, c).Status.Active.SerialNumber
		return newSerial != old, nil
	})
	t.Logf("%s: the new CA signs", time.Now().Format("15:04:05.000"))
	// Both serving certificates move to the new CA without a restart.
	e2etest.Eventually(t, 60*time.Second, "the webhook's certificate from the new CA", func(context.Context) (bool, error) {
		cert, err := w.source.GetCertificate(nil)
		return err == nil && e2etest.IssuerSerialOf(t, pemOf(cert), e2etest.CAObject(t, c).Status.CABundle) == newSerial, nil
	})
	e2etest.Eventually(t, 60*time.Second, "certapi's own certificate from the new CA", func(context.Context) (bool, error) {
		return servedIssuer(t, own) == newSerial, nil
	})
	t.Logf("%s: the webhook and certapi serve certificates from the new CA", time.Now().Format("15:04:05.000"))
	// The old CA leaves the bundle (20 s after the switch in this plane), and every target follows.
	var where string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		if n := e2etest.BundleSize([]byte(ca.Status.CABundle)); n != 1 {
			where = fmt.Sprintf("CertificateAuthority bundle holds %d CAs; Rotating: %+v", n, ca.Status.Conditions)
			return false, nil
		}
		got, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, vwc, metav1.GetOptions{})
		if err != nil || string(got.Webhooks[0].ClientConfig.CABundle) != ca.Status.CABundle {
			where = fmt.Sprintf("webhook configuration not updated (%v)", err)
			return false, nil
		}
		svc, err := aggregatorClient(t, own).ApiregistrationV1().APIServices().Get(ctx, framework.CertapiAPIService, metav1.GetOptions{})
		where = fmt.Sprintf("certapi's APIService not updated (%v)", err)
		return err == nil && string(svc.Spec.CABundle) == ca.Status.CABundle, nil
	})
	if err != nil {
		t.Fatalf("waiting for the old CA to leave every bundle: %v; last seen: %s", err, where)
	}
	t.Logf("%s: the old CA left every bundle", time.Now().Format("15:04:05.000"))
	// A few more calls on the final bundle alone.
	mu.Lock()
	n := calls
	mu.Unlock()
	e2etest.Eventually(t, 30*time.Second, "calls after the old CA left", func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return calls > n+10, nil
	})
	close(stop)
	wg.Wait()
	t.Logf("%d calls through the rotation, %d failed", calls, failures)
	if failures > 0 {
		t.Fatalf("%d of %d calls failed during the rotation; first: %v", failures, calls, firstFailure)
	}
}
