package injector

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	"github.com/certapi/certapi/pkg/signer"
)

// newBundle returns the PEM bundle of n fresh CAs.
func newBundle(tb testing.TB, n int) []byte {
	tb.Helper()
	var certs []*signer.CA
	for range n {
		ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local", Now: time.Now()})
		if err != nil {
			tb.Fatalf("NewCA: %v", err)
		}
		certs = append(certs, ca)
	}
	var b []byte
	for _, ca := range certs {
		b = append(b, signer.EncodeBundle(ca.Certificate)...)
	}
	return b
}

func svc() *admissionregistrationv1.ServiceReference {
	return &admissionregistrationv1.ServiceReference{Namespace: "ns", Name: "svc"}
}

func ptr[T any](v T) *T { return &v }

// decodePatch parses a JSON patch made by decide.
func decodePatch(t *testing.T, patch []byte) []jsonPatchOp {
	t.Helper()
	var ops []jsonPatchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatalf("patch %s: %v", patch, err)
	}
	return ops
}

func TestObserveWebhooks(t *testing.T) {
	bundle := newBundle(t, 1)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "w", UID: "u1", ResourceVersion: "7"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "a.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc()}},
			{Name: "url.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr("https://example.com/x")}},
			{Name: "b.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: bundle}},
		},
	}
	obs := observeValidating(vwc)
	if obs.Skip != "" || len(obs.Slots) != 2 {
		t.Fatalf("skip %q, %d slots; want 2 slots", obs.Skip, len(obs.Slots))
	}
	if s := obs.Slots[0]; s.Name != "a.example.com" || s.Path != "/webhooks/0/clientConfig/caBundle" || s.Digest != digestOf(nil) {
		t.Errorf("slot 0 = %+v", s)
	}
	if s := obs.Slots[1]; s.Name != "b.example.com" || s.Path != "/webhooks/2/clientConfig/caBundle" || s.Digest != digestOf(bundle) {
		t.Errorf("slot 1 = %+v", s)
	}
	if want := []string{"f:webhooks", `k:{"name":"b.example.com"}`, "f:clientConfig", "f:caBundle"}; strings.Join(obs.Slots[1].fieldPath, "|") != strings.Join(want, "|") {
		t.Errorf("fieldPath = %q, want %q", obs.Slots[1].fieldPath, want)
	}

	urlOnly := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "m"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			{Name: "url.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr("https://example.com/x")}},
		},
	}
	if obs := observeMutating(urlOnly); !strings.Contains(obs.Skip, "url") || len(obs.Slots) != 0 {
		t.Errorf("url-only: skip %q, slots %d", obs.Skip, len(obs.Slots))
	}
	if obs := observeMutating(&admissionregistrationv1.MutatingWebhookConfiguration{}); obs.Skip == "" {
		t.Error("no webhooks: not skipped")
	}
}

func TestDecideWebhooks(t *testing.T) {
	old, cur := newBundle(t, 1), newBundle(t, 2)
	d := digestOf(cur)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "w", ResourceVersion: "42"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			{Name: "a", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: cur}},
			{Name: "url", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr("https://example.com")}},
			{Name: "b", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: old}},
			{Name: "c", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc()}},
		},
	}
	obs := observeValidating(vwc)

	// b held the current bundle when certapi last looked (someone overwrote it); c is new.
	p := decide(obs, cur, d, map[string]digest{"a": d, "b": d})
	if p.upToDate || p.skip != "" || p.release != nil {
		t.Fatalf("plan = %+v", p)
	}
	ops := decodePatch(t, p.patch)
	want := []jsonPatchOp{
		{Op: "test", Path: "/metadata/resourceVersion", Value: "42"},
		{Op: "add", Path: "/webhooks/2/clientConfig/caBundle", Value: base64.StdEncoding.EncodeToString(cur)},
		{Op: "add", Path: "/webhooks/3/clientConfig/caBundle", Value: base64.StdEncoding.EncodeToString(cur)},
	}
	if len(ops) != len(want) {
		t.Fatalf("ops = %+v, want %+v", ops, want)
	}
	for n := range want {
		if ops[n] != want[n] {
			t.Errorf("op %d = %+v, want %+v", n, ops[n], want[n])
		}
	}
	if strings.Join(p.write, ",") != `webhook "b",webhook "c"` {
		t.Errorf("write = %q", p.write)
	}
	if strings.Join(p.overwritten, ",") != `webhook "b"` {
		t.Errorf("overwritten = %q; only b held the current bundle before", p.overwritten)
	}

	// A rotation: nothing held the new bundle before, so nothing was overwritten.
	if p := decide(obs, cur, d, map[string]digest{"a": digestOf(old), "b": digestOf(old)}); len(p.overwritten) != 0 {
		t.Errorf("rotation counted as overwrite: %q", p.overwritten)
	}

	// Up to date: no write at all (byte-stable).
	for n := range vwc.Webhooks {
		if vwc.Webhooks[n].ClientConfig.Service != nil {
			vwc.Webhooks[n].ClientConfig.CABundle = cur
		}
	}
	if p := decide(observeValidating(vwc), cur, d, nil); !p.upToDate || p.patch != nil {
		t.Errorf("up to date: plan = %+v", p)
	}
	// One byte of difference (a trailing newline) is a difference.
	vwc.Webhooks[0].ClientConfig.CABundle = append(bytes.Clone(cur), '\n')
	if p := decide(observeValidating(vwc), cur, d, nil); p.upToDate || len(p.write) != 1 {
		t.Errorf("trailing newline: plan = %+v", p)
	}
}

func crdWith(conv *apiextensionsv1.CustomResourceConversion, managed ...metav1.ManagedFieldsEntry) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "foos.example.com", ResourceVersion: "9", ManagedFields: managed},
		Spec:       apiextensionsv1.CustomResourceDefinitionSpec{Conversion: conv},
	}
}

func managedEntry(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "apiextensions.k8s.io/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
}

func TestObserveCRD(t *testing.T) {
	bundle := newBundle(t, 1)
	d := digestOf(bundle)
	webhook := func(cc apiextensionsv1.WebhookClientConfig) *apiextensionsv1.CustomResourceConversion {
		return &apiextensionsv1.CustomResourceConversion{
			Strategy: apiextensionsv1.WebhookConverter,
			Webhook:  &apiextensionsv1.WebhookConversion{ClientConfig: &cc, ConversionReviewVersions: []string{"v1"}},
		}
	}
	svcRef := &apiextensionsv1.ServiceReference{Namespace: "ns", Name: "svc"}

	for name, conv := range map[string]*apiextensionsv1.CustomResourceConversion{
		"no conversion": nil,
		"None":          {Strategy: apiextensionsv1.NoneConverter},
		"url":           webhook(apiextensionsv1.WebhookClientConfig{URL: ptr("https://example.com")}),
		"no config":     {Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{}},
	} {
		if obs := observeCRD(crdWith(conv)); obs.Skip == "" || len(obs.Slots) != 0 {
			t.Errorf("%s: skip %q, %d slots", name, obs.Skip, len(obs.Slots))
		}
	}

	obs := observeCRD(crdWith(webhook(apiextensionsv1.WebhookClientConfig{Service: svcRef})))
	if obs.Skip != "" || len(obs.Slots) != 1 || obs.Slots[0].Path != "/spec/conversion/webhook/clientConfig/caBundle" {
		t.Fatalf("webhook conversion: %+v", obs)
	}
	p := decide(obs, bundle, d, nil)
	ops := decodePatch(t, p.patch)
	if len(ops) != 2 || ops[0].Op != "test" || ops[0].Value != "9" || ops[1].Path != "/spec/conversion/webhook/clientConfig/caBundle" {
		t.Errorf("ops = %+v", ops)
	}

	// Injected, and spec.conversion is applied server-side by its owner: certapi gives up its entry.
	applied := managedEntry("owner", metav1.ManagedFieldsOperationApply, `{"f:spec":{"f:conversion":{"f:strategy":{},"f:webhook":{"f:clientConfig":{"f:service":{"f:name":{}}}}}}}`)
	ours := managedEntry(FieldManager, metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:conversion":{"f:webhook":{"f:clientConfig":{"f:caBundle":{}}}}}}`)
	status := managedEntry("kube-apiserver", metav1.ManagedFieldsOperationUpdate, `{"f:status":{"f:conditions":{}}}`)
	status.Subresource = "status"
	injected := webhook(apiextensionsv1.WebhookClientConfig{Service: svcRef, CABundle: bundle})
	obs = observeCRD(crdWith(injected, applied, status, ours))
	if !obs.release || obs.certapiEntry != 2 || !obs.certapiOnlyCABundle || strings.Join(obs.appliedBy, ",") != "owner" {
		t.Fatalf("observation = %+v", obs)
	}
	p = decide(obs, bundle, d, nil)
	if !p.upToDate || p.patch != nil || p.release == nil {
		t.Fatalf("plan = %+v", p)
	}
	ops = decodePatch(t, p.release)
	want := []jsonPatchOp{
		{Op: "test", Path: "/metadata/resourceVersion", Value: "9"},
		{Op: "test", Path: "/metadata/managedFields/2/manager", Value: "certapi"},
		{Op: "test", Path: "/metadata/managedFields/2/operation", Value: "Update"},
		{Op: "remove", Path: "/metadata/managedFields/2"},
	}
	if len(ops) != len(want) {
		t.Fatalf("release ops = %+v", ops)
	}
	for n := range want {
		if ops[n] != want[n] {
			t.Errorf("release op %d = %+v, want %+v", n, ops[n], want[n])
		}
	}

	// Not yet injected: write first; the release comes after, from the patch response.
	obs = observeCRD(crdWith(webhook(apiextensionsv1.WebhookClientConfig{Service: svcRef}), applied, ours))
	if p := decide(obs, bundle, d, nil); p.patch == nil || p.release != nil {
		t.Errorf("not injected: plan = %+v", p)
	}
	// Owned by an update-style manager (Helm 3, client-side kubectl, Argo CD without SSA): certapi keeps
	// its entry, which Argo CD's managedFieldsManagers: [certapi] relies on.
	updated := managedEntry("helm", metav1.ManagedFieldsOperationUpdate, `{"f:spec":{"f:conversion":{"f:strategy":{}}}}`)
	if obs := observeCRD(crdWith(injected, updated, ours)); obs.release {
		t.Error("release with no server-side apply owner")
	}
	// certapi's entry owns something besides caBundle: never removed.
	wide := managedEntry(FieldManager, metav1.ManagedFieldsOperationUpdate, `{"f:metadata":{"f:labels":{"f:x":{}}},"f:spec":{"f:conversion":{"f:webhook":{"f:clientConfig":{"f:caBundle":{}}}}}}`)
	if p := decide(observeCRD(crdWith(injected, applied, wide)), bundle, d, nil); p.release != nil {
		t.Error("released an entry that owns more than caBundle")
	}
}

func TestObserveAPIService(t *testing.T) {
	svcRef := &apiregistrationv1.ServiceReference{Namespace: "ns", Name: "svc", Port: ptr[int32](443)}
	local := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1.foo.example.com"}}
	if obs := observeAPIService(local); !strings.Contains(obs.Skip, "local") {
		t.Errorf("local: skip %q", obs.Skip)
	}
	insecure := &apiregistrationv1.APIService{Spec: apiregistrationv1.APIServiceSpec{Service: svcRef, InsecureSkipTLSVerify: true}}
	if obs := observeAPIService(insecure); !strings.Contains(obs.Skip, "insecureSkipTLSVerify") {
		t.Errorf("insecure: skip %q", obs.Skip)
	}
	remote := &apiregistrationv1.APIService{Spec: apiregistrationv1.APIServiceSpec{Service: svcRef}}
	if obs := observeAPIService(remote); obs.Skip != "" || len(obs.Slots) != 1 || obs.Slots[0].Path != "/spec/caBundle" {
		t.Errorf("remote: %+v", obs)
	}
}

func TestOverwrittenBy(t *testing.T) {
	bundle := newBundle(t, 1)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "w", ManagedFields: []metav1.ManagedFieldsEntry{
			managedEntry("owner", metav1.ManagedFieldsOperationApply, `{"f:webhooks":{"k:{\"name\":\"a\"}":{".":{},"f:name":{},"f:clientConfig":{"f:service":{}}}}}`),
			managedEntry("argocd-controller", metav1.ManagedFieldsOperationUpdate, `{"f:webhooks":{"k:{\"name\":\"a\"}":{"f:clientConfig":{"f:caBundle":{}}}}}`),
		}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "a", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc(), CABundle: bundle}}},
	}
	obs := observeValidating(vwc)
	if got := overwrittenBy(obs, []string{`webhook "a"`}); strings.Join(got, ",") != "argocd-controller" {
		t.Errorf("overwrittenBy = %q", got)
	}
}

func TestOnlyCABundle(t *testing.T) {
	for fields, want := range map[string]bool{
		`{"f:webhooks":{"k:{\"name\":\"a\"}":{"f:clientConfig":{"f:caBundle":{}}},"k:{\"name\":\"b\"}":{"f:clientConfig":{"f:caBundle":{}}}}}`: true,
		`{"f:spec":{"f:caBundle":{}}}`: true,
		`{"f:webhooks":{"k:{\"name\":\"a\"}":{".":{},"f:clientConfig":{"f:caBundle":{}}}}}`: false,
		`{"f:spec":{"f:caBundle":{},"f:service":{}}}`:                                       false,
		`{}`: false,
	} {
		var m map[string]any
		if err := json.Unmarshal([]byte(fields), &m); err != nil {
			t.Fatal(err)
		}
		if got := onlyCABundle(m); got != want {
			t.Errorf("onlyCABundle(%s) = %v, want %v", fields, got, want)
		}
	}
}

func TestForeignClaims(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        string
	}{
		{map[string]string{AnnotationInject: "true"}, ""},
		{map[string]string{"cert-manager.io/inject-ca-from": "ns/cert"}, "cert-manager.io/inject-ca-from"},
		{map[string]string{"cert-manager.io/inject-ca-from-secret": "ns/s", "cert-manager.io/inject-apiserver-ca": "true"},
			"cert-manager.io/inject-apiserver-ca,cert-manager.io/inject-ca-from-secret"},
		{map[string]string{"service.beta.openshift.io/inject-cabundle": "true"}, "service.beta.openshift.io/inject-cabundle"},
		{map[string]string{"cert-manager.io/issuer": "x"}, ""},
	} {
		if got := strings.Join(foreignClaims(tc.annotations), ","); got != tc.want {
			t.Errorf("foreignClaims(%v) = %q, want %q", tc.annotations, got, tc.want)
		}
	}
	msg := refusal(KindValidatingWebhookConfiguration, "w", []string{"cert-manager.io/inject-ca-from"})
	for _, s := range []string{"ValidatingWebhookConfiguration w", "cert-manager.io/inject-ca-from", AnnotationInject, "remove"} {
		if !strings.Contains(msg, s) {
			t.Errorf("refusal %q does not mention %q", msg, s)
		}
	}
}

func TestTrimMetadata(t *testing.T) {
	in := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "x", UID: "u", ResourceVersion: "5", Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{
				AnnotationInject: "true", "cert-manager.io/inject-ca-from": "ns/c",
				"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1<<16),
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}},
		},
	}
	out, err := trimMetadata(in)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(*metav1.PartialObjectMetadata)
	if m.Name != "x" || m.UID != "u" || m.ResourceVersion != "5" || m.Labels != nil || m.ManagedFields != nil {
		t.Errorf("trimmed = %+v", m.ObjectMeta)
	}
	if len(m.Annotations) != 3 || m.Annotations[AnnotationInject] != "true" || m.Annotations["cert-manager.io/inject-ca-from"] != "ns/c" || m.Annotations[annotationsHashKey] == "" {
		t.Errorf("annotations = %v", m.Annotations)
	}
	in.Annotations["other"] = "changed"
	out2, _ := trimMetadata(in)
	if out2.(*metav1.PartialObjectMetadata).Annotations[annotationsHashKey] == m.Annotations[annotationsHashKey] {
		t.Error("annotation hash did not change with an annotation")
	}
	notOptedIn := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "y", Annotations: map[string]string{"a": "b"}}}
	out3, _ := trimMetadata(notOptedIn)
	if out3.(*metav1.PartialObjectMetadata).Annotations != nil {
		t.Errorf("not opted in: annotations %v", out3.(*metav1.PartialObjectMetadata).Annotations)
	}
}

func TestCanonicalBundle(t *testing.T) {
	a, b := newBundle(t, 1), newBundle(t, 1)
	i := &Injector{bundleCache: map[digest]canonicalBundle{}}
	ab := append(append([]byte{}, a...), b...)
	// Comments, blank lines and a duplicate do not change the canonical bytes.
	messy := append(append(append([]byte("# trust bundle\n\n"), a...), []byte("\n# next\n")...), append(append([]byte{}, b...), a...)...)
	c1, c2 := i.canonical(ab), i.canonical(messy)
	if c1.err != nil || c2.err != nil {
		t.Fatalf("errors: %v, %v", c1.err, c2.err)
	}
	if !bytes.Equal(c1.pem, ab) || !bytes.Equal(c2.pem, ab) || c1.digest != c2.digest {
		t.Errorf("canonical forms differ:\n%s\n%s", c1.pem, c2.pem)
	}
	if c := i.canonical([]byte("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n")); c.err == nil {
		t.Error("a damaged bundle was accepted")
	}
}

func TestSummaryAndAllHold(t *testing.T) {
	// Summary and AllHold on hand-made state (the informer-backed parts are covered against kube-apiserver).
	bundle := newBundle(t, 1)
	i := &Injector{objects: map[key]*objState{}, bundleCache: map[digest]canonicalBundle{}}
	i.objects[key{KindAPIService, "b"}] = &objState{state: StateSkipped, reason: ReasonNothingToInject, message: "local"}
	i.objects[key{KindValidatingWebhookConfiguration, "z"}] = &objState{state: StateConflict, reason: ReasonClaimedByAnotherInjector, message: "m"}
	i.source = &fakeSource{pem: bundle}
	i.objects[key{KindValidatingWebhookConfiguration, "a"}] = &objState{state: StateUpToDate, bundle: i.canonical(bundle).digest}
	i.objects[key{KindValidatingWebhookConfiguration, "old"}] = &objState{state: StateUpToDate, bundle: digestOf([]byte("an earlier bundle"))}
	i.objects[key{KindCustomResourceDefinition, "c"}] = &objState{state: StatePending}
	s := i.Summary()
	if s.Targets != 5 || s.UpToDate != 1 || s.Skipped != 1 || s.Conflicts != 1 || s.Pending != 2 {
		t.Errorf("summary = %+v", s)
	}
	if len(s.Problems) != 2 || s.Problems[0].Name != "z" || s.Problems[1].Kind != KindAPIService {
		t.Errorf("problems = %+v", s.Problems)
	}
	if api := s.InjectionSummary(); api.Targets != 5 || api.Conflicts != 1 {
		t.Errorf("InjectionSummary = %+v", api)
	}
	if i.AllHold(bundle) {
		t.Error("AllHold before the informers synced")
	}
}
