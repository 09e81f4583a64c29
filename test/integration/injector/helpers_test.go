package injector_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// One control plane (etcd + kube-apiserver, no certapi) for every test in the package, started on
// first use. The tests run one after another, each with its own Injector, and each deletes what it
// made.
var (
	cpOnce sync.Once
	cp     *framework.ControlPlane
	cpErr  error
	cpDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if cp != nil {
		if code != 0 {
			framework.PrintLogTails(os.Stderr, cp.Logs())
		}
		cp.Stop()
	}
	if cpDir != "" {
		_ = os.RemoveAll(cpDir)
	}
	os.Exit(code)
}

func controlPlane(t *testing.T) *framework.ControlPlane {
	t.Helper()
	cpOnce.Do(func() {
		cpDir, cpErr = os.MkdirTemp("", "injector-test-")
		if cpErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cp, cpErr = framework.Start(ctx, framework.Options{Dir: cpDir, SkipCertapi: true})
		if cpErr != nil && cp != nil {
			framework.PrintLogTails(os.Stderr, cp.Logs())
		}
	})
	if cpErr != nil {
		t.Fatalf("starting etcd and kube-apiserver: %v", cpErr)
	}
	return cp
}

// fakeSource is a BundleSource a test sets. It tells its listeners of every set unless quiet, so that a
// test can check that Trigger alone re-checks every target.
type fakeSource struct {
	mu        sync.Mutex
	pem       []byte
	quiet     bool
	listeners []dynamiccertificates.Listener
}

func (s *fakeSource) AddListener(l dynamiccertificates.Listener) func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listeners = append(s.listeners, l)
	return func() {}
}

func (s *fakeSource) Bundle() ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.pem), len(s.pem) > 0
}

func (s *fakeSource) set(pem []byte) {
	s.mu.Lock()
	s.pem = bytes.Clone(pem)
	var ls []dynamiccertificates.Listener
	if !s.quiet {
		ls = append(ls, s.listeners...)
	}
	s.mu.Unlock()
	for _, l := range ls {
		l.Enqueue()
	}
}

// writeCounter counts the injector's successful PATCH requests (its writes) by URL path. A patch that
// kube-apiserver refuses (its resourceVersion test failed) changes nothing and is not counted in
// counts, only in tries; one in flight is counted in both.
type writeCounter struct {
	mu     sync.Mutex
	counts map[string]int
	tries  map[string]int
}

func (c *writeCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method != http.MethodPatch {
			return rt.RoundTrip(req)
		}
		// Counted as it is sent and uncounted when refused: a test that reads what a write did, through
		// its own client, may do so before the injector's client has the answer, and must find it counted.
		c.mu.Lock()
		if c.tries == nil {
			c.tries = map[string]int{}
		}
		c.tries[req.URL.Path]++
		c.counts[req.URL.Path]++
		c.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode >= 300 {
			c.mu.Lock()
			c.counts[req.URL.Path]--
			c.mu.Unlock()
		}
		return resp, err
	})
}

// patches returns how many writes went to a path ending in suffix (e.g. "/w1").
func (c *writeCounter) patches(suffix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for p, v := range c.counts {
		if strings.HasSuffix(p, suffix) {
			n += v
		}
	}
	return n
}

// attempts returns how many PATCH requests, refused or not, went to a path ending in suffix.
func (c *writeCounter) attempts(suffix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for p, v := range c.tries {
		if strings.HasSuffix(p, suffix) {
			n += v
		}
	}
	return n
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// env is a control plane, clients as an admin, a fake bundle source and (after start) an Injector.
type env struct {
	t      *testing.T
	cp     *framework.ControlPlane
	kube   kubernetes.Interface
	ext    apiextensionsclient.Interface
	agg    aggregatorclient.Interface
	source *fakeSource
	writes *writeCounter
	inj    *injector.Injector
}

func newEnv(t *testing.T, bundle []byte) *env {
	t.Helper()
	e := &env{t: t, cp: controlPlane(t), source: &fakeSource{}, writes: &writeCounter{counts: map[string]int{}}}
	e.source.set(bundle)
	cfg := rest.CopyConfig(e.cp.AdminConfig)
	e.kube = kubernetes.NewForConfigOrDie(cfg)
	e.ext = apiextensionsclient.NewForConfigOrDie(cfg)
	e.agg = aggregatorclient.NewForConfigOrDie(cfg)
	return e
}

// start makes and runs an Injector (tweak, when set, adjusts its Options before New) until the test
// ends.
func (e *env) start(tweak func(*injector.Options)) *injector.Injector {
	e.t.Helper()
	cfg := rest.CopyConfig(e.cp.AdminConfig)
	cfg.Wrap(e.writes.wrap)
	clients, err := controller.NewKubeClients(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: clients.Kube.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		e.t.Fatal(err)
	}
	cc := controller.NewContext("cluster.local", clients, broadcaster)
	opts := injector.Options{Context: cc, Source: e.source}
	if tweak != nil {
		tweak(&opts)
	}
	inj, err := injector.New(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- cc.RunTerm(ctx, controller.Named{Name: "injector", Runnable: inj})
		broadcaster.Shutdown()
	}()
	e.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				e.t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			e.t.Error("Run did not return after its context ended")
		}
	})
	e.inj = inj
	e.waitFor("the informers to sync", 30*time.Second, func(context.Context) (bool, error) {
		return inj.HasSynced(), nil
	})
	return inj
}

// waitFor polls cond every 10 ms until it holds, failing the test after timeout with cond's last error.
// It returns how long it took.
func (e *env) waitFor(what string, timeout time.Duration, cond wait.ConditionWithContextFunc) time.Duration {
	e.t.Helper()
	return testhelpers.WaitFor(e.t, 10*time.Millisecond, timeout, what, testhelpers.LastWord(cond))
}

// configMapHolds is a condition: ConfigMap namespace/name holds bundle as its data["ca.crt"].
func (e *env) configMapHolds(namespace, name string, bundle []byte) wait.ConditionWithContextFunc {
	return func(ctx context.Context) (bool, error) {
		cm, err := e.kube.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cm.Data[injector.ConfigMapKey] == string(bundle), nil
	}
}

// never checks that cond does not become true for d (polling every 10 ms): for "left alone".
func (e *env) never(what string, d time.Duration, cond wait.ConditionWithContextFunc) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, d, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		return ok && err == nil, nil
	})
	if err == nil {
		e.t.Fatalf("%s within %s", what, d)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !wait.Interrupted(err) {
		e.t.Fatalf("checking that %s does not happen: %v", what, err)
	}
}

// apply server-side applies a JSON manifest as manager, with force.
func (e *env) apply(kind injector.Kind, name, manifest, manager string) error {
	ctx := context.Background()
	opts := metav1.PatchOptions{FieldManager: manager, Force: ptr(true)}
	var err error
	switch kind {
	case injector.KindValidatingWebhookConfiguration:
		_, err = e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, name, types.ApplyPatchType, []byte(manifest), opts)
	case injector.KindMutatingWebhookConfiguration:
		_, err = e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, name, types.ApplyPatchType, []byte(manifest), opts)
	case injector.KindCustomResourceDefinition:
		_, err = e.ext.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, name, types.ApplyPatchType, []byte(manifest), opts)
	case injector.KindAPIService:
		_, err = e.agg.ApiregistrationV1().APIServices().Patch(ctx, name, types.ApplyPatchType, []byte(manifest), opts)
	case injector.KindConfigMap:
		ns, n := splitKey(name)
		_, err = e.kube.CoreV1().ConfigMaps(ns).Patch(ctx, n, types.ApplyPatchType, []byte(manifest), opts)
	}
	return err
}

// mustApply applies and deletes the object when the test ends.
func (e *env) mustApply(kind injector.Kind, name, manifest, manager string) {
	e.t.Helper()
	if err := e.apply(kind, name, manifest, manager); err != nil {
		e.t.Fatalf("applying %s %s: %v", kind, name, err)
	}
	e.cleanup(kind, name)
}

// patch JSON-patches an object as manager (another writer than certapi).
func (e *env) patch(kind injector.Kind, name, manager string, patch string) error {
	ctx := context.Background()
	opts := metav1.PatchOptions{FieldManager: manager}
	pt := types.JSONPatchType
	if strings.HasPrefix(patch, "{") {
		pt = types.MergePatchType
	}
	var err error
	switch kind {
	case injector.KindValidatingWebhookConfiguration:
		_, err = e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Patch(ctx, name, pt, []byte(patch), opts)
	case injector.KindMutatingWebhookConfiguration:
		_, err = e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, name, pt, []byte(patch), opts)
	case injector.KindCustomResourceDefinition:
		_, err = e.ext.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, name, pt, []byte(patch), opts)
	case injector.KindAPIService:
		_, err = e.agg.ApiregistrationV1().APIServices().Patch(ctx, name, pt, []byte(patch), opts)
	case injector.KindConfigMap:
		ns, n := splitKey(name)
		_, err = e.kube.CoreV1().ConfigMaps(ns).Patch(ctx, n, pt, []byte(patch), opts)
	}
	return err
}

func (e *env) cleanup(kind injector.Kind, name string) {
	e.t.Cleanup(func() {
		ctx := context.Background()
		var err error
		switch kind {
		case injector.KindValidatingWebhookConfiguration:
			err = e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
		case injector.KindMutatingWebhookConfiguration:
			err = e.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, name, metav1.DeleteOptions{})
		case injector.KindCustomResourceDefinition:
			err = e.ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, name, metav1.DeleteOptions{})
		case injector.KindAPIService:
			err = e.agg.ApiregistrationV1().APIServices().Delete(ctx, name, metav1.DeleteOptions{})
		case injector.KindConfigMap:
			ns, n := splitKey(name)
			err = e.kube.CoreV1().ConfigMaps(ns).Delete(ctx, n, metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			e.t.Errorf("deleting %s %s: %v", kind, name, err)
		}
	})
}

func (e *env) vwc(name string) *admissionregistrationv1.ValidatingWebhookConfiguration {
	e.t.Helper()
	o, err := e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("getting ValidatingWebhookConfiguration %s: %v", name, err)
	}
	return o
}

// vwcHolds reports whether every service webhook of VWC name holds bundle.
func (e *env) vwcHolds(name string, bundle []byte) wait.ConditionWithContextFunc {
	return func(ctx context.Context) (bool, error) {
		o, err := e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, w := range o.Webhooks {
			if w.ClientConfig.Service != nil && !bytes.Equal(w.ClientConfig.CABundle, bundle) {
				return false, nil
			}
		}
		return true, nil
	}
}

// summaryHas reports whether the Summary lists a problem for kind/name with reason.
func (e *env) problem(kind injector.Kind, name string) *injector.Problem {
	for _, p := range e.inj.Summary().Problems {
		if p.Kind == kind && p.Name == name {
			return &p
		}
	}
	return nil
}

// warningEvent returns the first Warning Event with reason regarding kind/name, or nil. Events about
// a ConfigMap ("<namespace>/<name>") are in its namespace, the others in default.
func (e *env) warningEvent(ctx context.Context, kind injector.Kind, name, reason string) (*eventInfo, error) {
	ns, regardingNS := metav1.NamespaceDefault, ""
	if kind == injector.KindConfigMap {
		ns, name = splitKey(name)
		regardingNS = ns
	}
	evs, err := e.kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, ev := range evs.Items {
		if ev.Regarding.Kind == string(kind) && ev.Regarding.Name == name && ev.Regarding.Namespace == regardingNS && ev.Reason == reason && ev.Type == "Warning" {
			return &eventInfo{note: ev.Note, controller: ev.ReportingController, apiVersion: ev.Regarding.APIVersion}, nil
		}
	}
	return nil, nil
}

type eventInfo struct{ note, controller, apiVersion string }

// webhookManifest is a ValidatingWebhookConfiguration (or, with kind, a Mutating one) opted in,
// with one entry per name: "url:" names get a url clientConfig, the others a service.
func webhookManifest(kind injector.Kind, name string, annotations map[string]string, webhooks ...string) string {
	var entries []string
	for _, w := range webhooks {
		cc := `{"service":{"namespace":"webhooks","name":"svc","path":"/validate"}}`
		if after, ok := strings.CutPrefix(w, "url:"); ok {
			w = after
			cc = `{"url":"https://hooks.example.com/validate"}`
		}
		entries = append(entries, fmt.Sprintf(`{"name":%q,"sideEffects":"None","admissionReviewVersions":["v1"],"failurePolicy":"Ignore","clientConfig":%s}`, w, cc))
	}
	return fmt.Sprintf(`{"apiVersion":"admissionregistration.k8s.io/v1","kind":%q,"metadata":{"name":%q,"annotations":%s},"webhooks":[%s]}`,
		kind, name, jsonMap(annotations), strings.Join(entries, ","))
}

// crdManifest is a CRD <plural>.example.com with two versions and the given conversion JSON ("" for none).
func crdManifest(plural string, annotations map[string]string, conversion string) string {
	kind := strings.ToUpper(plural[:1]) + strings.TrimSuffix(plural[1:], "s")
	conv := ""
	if conversion != "" {
		conv = `,"conversion":` + conversion
	}
	schema := `{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}`
	return fmt.Sprintf(`{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"%s.example.com","annotations":%s},`+
		`"spec":{"group":"example.com","scope":"Namespaced","names":{"plural":%q,"singular":%q,"kind":%q,"listKind":%q},`+
		`"versions":[{"name":"v1","served":true,"storage":true,"schema":%s},{"name":"v2","served":true,"storage":false,"schema":%s}]%s}}`,
		plural, jsonMap(annotations), plural, strings.TrimSuffix(plural, "s"), kind, kind+"List", schema, schema, conv)
}

const webhookConversion = `{"strategy":"Webhook","webhook":{"conversionReviewVersions":["v1"],"clientConfig":{"service":{"namespace":"webhooks","name":"svc","path":"/convert"}}}}`

// apiServiceManifest is an APIService v1.<group>; spec is its spec JSON without the group and version.
func apiServiceManifest(group string, annotations map[string]string, spec string) string {
	if spec != "" {
		spec = "," + spec
	}
	return fmt.Sprintf(`{"apiVersion":"apiregistration.k8s.io/v1","kind":"APIService","metadata":{"name":"v1.%s","annotations":%s},`+
		`"spec":{"group":%q,"version":"v1","groupPriorityMinimum":100,"versionPriority":10%s}}`, group, jsonMap(annotations), group, spec)
}

func jsonMap(m map[string]string) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%q:%q", k, v))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

var optIn = map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}

func ptr[T any](v T) *T { return &v }

// splitKey splits a namespaced key "<namespace>/<name>".
func splitKey(key string) (namespace, name string) {
	namespace, name, _ = strings.Cut(key, "/")
	return namespace, name
}

// configMapManifest is ConfigMap namespace/name with the given annotations and data (nil for none).
func configMapManifest(namespace, name string, annotations, data map[string]string) string {
	d := ""
	if data != nil {
		d = `,"data":` + jsonMap(data)
	}
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":%q,"name":%q,"annotations":%s}%s}`,
		namespace, name, jsonMap(annotations), d)
}

// namespace creates namespace name unless it exists. Nothing deletes it: without a controller manager a
// deleted namespace stays Terminating, and the tests delete what they make in it.
func (e *env) namespace(name string) {
	e.t.Helper()
	_, err := e.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatalf("creating namespace %s: %v", name, err)
	}
}
