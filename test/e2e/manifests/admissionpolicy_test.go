package manifests

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

var (
	gvrVWC        = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
	gvrMWC        = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
	gvrCRD        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	gvrAPIService = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	gvrConfigMap  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// checkCABundleOnly runs on the control plane of TestManifestsRBACRunsCertapi, where the base manifests
// (policies included) are applied for real and certapi has injected its bundle, under those policies, into
// the ValidatingWebhookConfiguration mf-rbac, the MutatingWebhookConfiguration mf-rbac, the CRD
// mfwidgets.example.com, its own APIService and the ConfigMap trust of namespace ns. As certapi's
// ServiceAccount (sa), every change but a caBundle is refused by kube-apiserver; the same changes by
// another user are not.
func checkCABundleOnly(t *testing.T, own *framework.ControlPlane, sa *rest.Config, ns string) {
	ctx := context.Background()
	asSA, err := dynamic.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	asAdmin, err := dynamic.NewForConfig(own.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}

	patch := func(client dynamic.Interface, gvr schema.GroupVersionResource, name string, ops ...string) error {
		var r dynamic.ResourceInterface = client.Resource(gvr)
		if gvr == gvrConfigMap {
			r = client.Resource(gvr).Namespace(ns)
		}
		_, err := r.Patch(ctx, name, types.JSONPatchType, []byte("["+strings.Join(ops, ",")+"]"), metav1.PatchOptions{})
		return err
	}
	// A policy takes effect once kube-apiserver's admission plugin has seen it; certapi's own
	// (caBundle) writes do not show that. Wait until a label change by the ServiceAccount is refused.
	e2etest.Eventually(t, time.Minute, "the policies to take effect", func(context.Context) (bool, error) {
		err := patch(asSA, gvrVWC, "mf-rbac", `{"op":"add","path":"/metadata/labels","value":{"probe":"x"}}`)
		errCM := patch(asSA, gvrConfigMap, "trust", `{"op":"add","path":"/metadata/labels","value":{"probe":"x"}}`)
		return err != nil && strings.Contains(err.Error(), "certapi-cabundle-only-webhooks") &&
			errCM != nil && strings.Contains(errCM.Error(), "certapi-cabundle-only-configmaps"), nil
	})

	// bundlePlusNewline is a different caBundle value that still holds the same certificates.
	bundlePlusNewline := func(gvr schema.GroupVersionResource, name string, path ...string) string {
		t.Helper()
		u, err := asAdmin.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var b64 string
		if path[0] == "webhooks" {
			hooks, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
			b64, _, _ = unstructured.NestedString(hooks[0].(map[string]any), path[1:]...)
		} else {
			b64, _, _ = unstructured.NestedString(u.Object, path...)
		}
		pem, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(pem) == 0 {
			t.Fatalf("%s %s has no caBundle at %v yet: %v", gvr.Resource, name, path, err)
		}
		return fmt.Sprintf("%q", base64.StdEncoding.EncodeToString(append(pem, '\n')))
	}

	configMapBundlePlusNewline := func() string {
		t.Helper()
		u, err := asAdmin.Resource(gvrConfigMap).Namespace(ns).Get(ctx, "trust", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pem, _, _ := unstructured.NestedString(u.Object, "data", "ca.crt")
		if pem == "" {
			t.Fatalf("ConfigMap %s/trust has no ca.crt yet", ns)
		}
		return fmt.Sprintf("%q", pem+"\n")
	}

	cases := []struct {
		name     string
		gvr      schema.GroupVersionResource
		object   string
		op       string
		refusal  string // "" when certapi's ServiceAccount may make the change
		adminToo bool   // run the change as another user as well: it must pass
	}{
		{name: "webhook clientConfig.service", gvr: gvrVWC, object: "mf-rbac",
			op: `{"op":"replace","path":"/webhooks/0/clientConfig/service/name","value":"elsewhere"}`, refusal: "clientConfig.service", adminToo: true},
		{name: "webhook clientConfig.service.path", gvr: gvrVWC, object: "mf-rbac",
			op: `{"op":"replace","path":"/webhooks/0/clientConfig/service/path","value":"/steal"}`, refusal: "clientConfig.service", adminToo: true},
		{name: "webhook rules", gvr: gvrVWC, object: "mf-rbac",
			op: `{"op":"replace","path":"/webhooks/0/rules/0/operations","value":["CREATE","UPDATE"]}`, refusal: "rules", adminToo: true},
		{name: "webhook failurePolicy", gvr: gvrVWC, object: "mf-rbac",
			op: `{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}`, refusal: "policies"},
		{name: "webhook removed", gvr: gvrVWC, object: "mf-rbac",
			op: `{"op":"remove","path":"/webhooks/0"}`, refusal: "removed"},
		{name: "webhook annotation", gvr: gvrVWC, object: "mf-rbac",
			op: `{"op":"add","path":"/metadata/annotations/certapi.dev~1inject-ca-bundle","value":"false"}`, refusal: "annotations"},
		{name: "mutating webhook reinvocationPolicy", gvr: gvrMWC, object: "mf-rbac",
			op: `{"op":"replace","path":"/webhooks/0/reinvocationPolicy","value":"IfNeeded"}`, refusal: "policies", adminToo: true},
		{name: "mutating webhook clientConfig.url", gvr: gvrMWC, object: "mf-rbac",
			op: `{"op":"remove","path":"/webhooks/0/clientConfig/service"},{"op":"add","path":"/webhooks/0/clientConfig/url","value":"https://attacker.example.com/"}`, refusal: "clientConfig.service or clientConfig.url"},
		{name: "CRD conversion service", gvr: gvrCRD, object: "mfwidgets.example.com",
			op: `{"op":"replace","path":"/spec/conversion/webhook/clientConfig/service/name","value":"elsewhere"}`, refusal: "another field of the spec", adminToo: true},
		{name: "CRD versions", gvr: gvrCRD, object: "mfwidgets.example.com",
			op: `{"op":"replace","path":"/spec/versions/1/served","value":false}`, refusal: "another field of the spec"},
		{name: "APIService groupPriorityMinimum", gvr: gvrAPIService, object: framework.CertapiAPIService,
			op: `{"op":"replace","path":"/spec/groupPriorityMinimum","value":999}`, refusal: "another field of the spec"},
		{name: "APIService label", gvr: gvrAPIService, object: framework.CertapiAPIService,
			op: `{"op":"add","path":"/metadata/labels/x","value":"y"}`, refusal: "labels"},
		{name: "webhook caBundle", gvr: gvrVWC, object: "mf-rbac",
			op: `{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":` + bundlePlusNewline(gvrVWC, "mf-rbac", "webhooks", "clientConfig", "caBundle") + `}`},
		{name: "mutating webhook caBundle", gvr: gvrMWC, object: "mf-rbac",
			op: `{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":` + bundlePlusNewline(gvrMWC, "mf-rbac", "webhooks", "clientConfig", "caBundle") + `}`},
		{name: "CRD conversion caBundle", gvr: gvrCRD, object: "mfwidgets.example.com",
			op: `{"op":"replace","path":"/spec/conversion/webhook/clientConfig/caBundle","value":` + bundlePlusNewline(gvrCRD, "mfwidgets.example.com", "spec", "conversion", "webhook", "clientConfig", "caBundle") + `}`},
		{name: "ConfigMap label", gvr: gvrConfigMap, object: "trust",
			op: `{"op":"add","path":"/metadata/labels","value":{"x":"y"}}`, refusal: "labels"},
		{name: "ConfigMap another key", gvr: gvrConfigMap, object: "trust",
			op: `{"op":"add","path":"/data/other","value":"x"}`, refusal: "another key of data", adminToo: true},
		{name: "ConfigMap binaryData", gvr: gvrConfigMap, object: "trust",
			op: `{"op":"add","path":"/binaryData","value":{"x":"eA=="}}`, refusal: "binaryData"},
		{name: "ConfigMap ca.crt", gvr: gvrConfigMap, object: "trust",
			op: `{"op":"replace","path":"/data/ca.crt","value":` + configMapBundlePlusNewline() + `}`},
		{name: "APIService caBundle", gvr: gvrAPIService, object: framework.CertapiAPIService,
			op: `{"op":"replace","path":"/spec/caBundle","value":` + bundlePlusNewline(gvrAPIService, framework.CertapiAPIService, "spec", "caBundle") + `}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := patch(asSA, tc.gvr, tc.object, tc.op)
			if tc.refusal == "" {
				if err != nil {
					t.Fatalf("certapi's ServiceAccount may not change a caBundle: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("certapi's ServiceAccount: %v; want 403 from the policy that says %q", err, tc.refusal)
			}
			if tc.adminToo {
				// Another user is not affected: the same change passes the policy.
				if err := patch(asAdmin, tc.gvr, tc.object, tc.op); err != nil {
					t.Fatalf("another user may not make the same change: %v", err)
				}
			}
		})
	}
}

// typeCheckPolicies type-checks every ValidatingAdmissionPolicy in objs against the schemas kube-apiserver
// serves for the kinds it matches, as kube-controller-manager does to fill in status.typeChecking (no
// kube-controller-manager runs here): a misspelt field is a warning there, and an error on every request
// at run time.
func typeCheckPolicies(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	_, kube := testhelpers.Clients(t, cp.AdminConfig)
	checker := &validating.TypeChecker{
		SchemaResolver: &resolver.ClientDiscoveryResolver{Discovery: kube.Discovery()},
		RestMapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery())),
	}
	n := 0
	for _, u := range ofKind(objs, "ValidatingAdmissionPolicy") {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		convert(t, u, &p)
		n++
		// The checker resolves a rule's resources to kinds with the RESTMapper, which knows no
		// subresources, so it skips a policy on resourcequotas/status (kube-controller-manager's as
		// well). A status subresource, and the approval subresource of CertificateSigningRequests, takes
		// and returns its resource's kind: check against that, once for the resource and its
		// subresources. A scale subresource takes and returns an autoscaling/v1 Scale, a kind the rule
		// does not name: it is left out here, and the keep-etcd-quorum policy's expressions on a Scale
		// (spec.replicas, which a Scale has as a StatefulSet does) are run by checkKeepEtcdQuorum with
		// kubectl scale.
		// The checker skips a kind whose schema it cannot resolve, silently: make sure it resolved every
		// kind the policy matches, by a field that no kind has.
		p = *p.DeepCopy()
		kinds := 0
		for i, r := range p.Spec.MatchConstraints.ResourceRules {
			var resources []string
			for _, res := range r.Resources {
				if strings.HasSuffix(res, "/scale") {
					continue
				}
				res = strings.TrimSuffix(strings.TrimSuffix(res, "/status"), "/approval")
				if !slices.Contains(resources, res) {
					resources = append(resources, res)
				}
			}
			p.Spec.MatchConstraints.ResourceRules[i].Resources = resources
			kinds += servedKinds(t, p.Spec.MatchConstraints.ResourceRules[i])
		}
		if got := checker.CheckExpression(checker.CreateContext(&p), "object.certapiNoSuchField == 1"); len(got) != kinds {
			t.Errorf("ValidatingAdmissionPolicy %s: the type checker checked %d kinds, want %d: %v", p.Name, len(got), kinds, got)
		}
		for _, w := range checker.Check(&p) {
			t.Errorf("ValidatingAdmissionPolicy %s: %s: %s", p.Name, w.FieldRef, w.Warning)
		}
	}
	if n == 0 {
		t.Error("no ValidatingAdmissionPolicy to check")
	}
}

// servedKinds counts the resources of rule that kube-apiserver serves in at least one of its API versions: a
// policy's rule for a kind an older Kubernetes lacks (certificates.k8s.io/v1 ClusterTrustBundles before
// 1.37) matches nothing there, and the type checker has no schema to check it against.
func servedKinds(t *testing.T, rule admissionregistrationv1.NamedRuleWithOperations) int {
	t.Helper()
	n := 0
	for _, res := range rule.Resources {
		served := false
		for _, g := range rule.APIGroups {
			for _, v := range rule.APIVersions {
				gv := schema.GroupVersion{Group: g, Version: v}.String()
				if ok, _ := testhelpers.Served(t, cp.AdminConfig, gv, res); ok {
					served = true
				}
			}
		}
		if served {
			n++
		}
	}
	return n
}

// checkStolenToken runs on the control plane of TestManifestsRBACRunsCertapi after certapi has done its
// work there: the base manifests' RBAC and ValidatingAdmissionPolicies are applied for real, the Secret
// webhook-tls was delivered into ns, and the ConfigMap trust of ns and the ValidatingWebhookConfiguration
// mf-rbac opted in and hold certapi's bundle. As certapi's ServiceAccount (sa), as a thief of its token
// would: every write the security review made (issue #21) and its variants is refused, each by the rule
// that says why, and every write certapi itself makes still passes.
func checkStolenToken(t *testing.T, own *framework.ControlPlane, sa *rest.Config, ns string) {
	ctx := context.Background()
	_, kube := testhelpers.Clients(t, own.AdminConfig)
	_, asSA := testhelpers.Clients(t, sa)
	dynSA, err := dynamic.NewForConfig(sa)
	if err != nil {
		t.Fatal(err)
	}
	const (
		managed   = "certapi.dev/managed"
		request   = "certapi.dev/servingcertrequest"
		uid       = "certapi.dev/servingcertrequest-uid"
		serial    = "certapi.dev/serial-number"
		optIn     = "certapi.dev/inject-ca-bundle"
		ctbName   = "certapi.dev:serving:ca"
		signer    = "certapi.dev/serving"
		releaseNS = "certapi-system"
	)
	// Kubernetes before 1.37 serves no certificates.k8s.io/v1 ClusterTrustBundles: certapi publishes none
	// there, and the chart installs no policy for them (its Capabilities); the cases of that policy are
	// left out.
	ctbServed, _ := testhelpers.Served(t, own.AdminConfig, "certificates.k8s.io/v1", "clustertrustbundles")
	// What the thief aims at, made by the admin: objects that did not opt in to injection, an opted-in
	// kube-root-ca.crt (kube-controller-manager's), a TLS Secret nobody handed to certapi, and one that a
	// chart handed over (annotated with a request), with a label, an annotation and a key of its own.
	objs, err := framework.DecodeManifests([]byte(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: mf-stolen
webhooks:
- name: mf-stolen.example.com
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig:
    service: {name: webhook, namespace: ` + ns + `, path: /validate}
  rules:
  - apiGroups: ["example.com"]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["nothings"]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: mfstolens.example.com
spec:
  group: example.com
  names: {kind: MfStolen, plural: mfstolens, singular: mfstolen, listKind: MfStolenList}
  scope: Namespaced
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        service: {name: webhook, namespace: ` + ns + `, path: /convert}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}
  - {name: v2, served: true, storage: false, schema: {openAPIV3Schema: {type: object}}}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: not-opted-in
  namespace: ` + ns + `
data:
  ca.crt: "the workload's own CA"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: kube-root-ca.crt
  namespace: ` + ns + `
  annotations:
    ` + optIn + `: "true"
data:
  ca.crt: "kube-apiserver's CA"
---
apiVersion: v1
kind: Secret
metadata:
  name: foreign-tls
  namespace: ` + ns + `
type: kubernetes.io/tls
data:
  tls.crt: Zm9yZWlnbg==
  tls.key: Zm9yZWlnbg==
---
apiVersion: v1
kind: Secret
metadata:
  name: handed-over
  namespace: ` + ns + `
  labels:
    app: web
  annotations:
    ` + request + `: handed-over
    example.com/owner: chart
type: kubernetes.io/tls
data:
  tls.crt: ""
  tls.key: ""
  extra: Y2hhcnQ=
`))
	if err != nil {
		t.Fatal(err)
	}
	adminDyn, err := dynamic.NewForConfig(own.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery()))
	for _, u := range objs {
		m, err := mapper.RESTMapping(u.GroupVersionKind().GroupKind(), u.GroupVersionKind().Version)
		if err != nil {
			t.Fatal(err)
		}
		var r dynamic.ResourceInterface = adminDyn.Resource(m.Resource)
		if u.GetNamespace() != "" {
			r = adminDyn.Resource(m.Resource).Namespace(u.GetNamespace())
		}
		if _, err := r.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}

	jsonPatch := func(gvr schema.GroupVersionResource, namespace, name string, ops ...string) func(context.Context) error {
		return func(ctx context.Context) error {
			var r dynamic.ResourceInterface = dynSA.Resource(gvr)
			if namespace != "" {
				r = dynSA.Resource(gvr).Namespace(namespace)
			}
			_, err := r.Patch(ctx, name, types.JSONPatchType, []byte("["+strings.Join(ops, ",")+"]"), metav1.PatchOptions{})
			return err
		}
	}
	// A merge patch of a Secret, as certapi's delivery writes one.
	secretPatch := func(namespace, name string, patch map[string]any) func(context.Context) error {
		return func(ctx context.Context) error {
			data, err := json.Marshal(patch)
			if err != nil {
				return err
			}
			_, err = asSA.CoreV1().Secrets(namespace).Patch(ctx, name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: "certapi"})
			return err
		}
	}
	pemish := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	certapiSecret := func(namespace, name string, typ corev1.SecretType, mutate func(*corev1.Secret)) func(context.Context) error {
		return func(ctx context.Context) error {
			s := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
					Labels:      map[string]string{managed: "true"},
					Annotations: map[string]string{request: name, uid: "0b3e4a1c-uid", serial: "01"}},
				Type: typ,
				Data: map[string][]byte{"tls.crt": pemish, "tls.key": pemish, "ca.crt": pemish},
			}
			if mutate != nil {
				mutate(s)
			}
			_, err := asSA.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{FieldManager: "certapi"})
			return err
		}
	}
	ctb := func(name, signerName string, labels map[string]string) func(context.Context) error {
		return func(ctx context.Context) error {
			b := &certificatesv1.ClusterTrustBundle{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
				Spec:       certificatesv1.ClusterTrustBundleSpec{SignerName: signerName, TrustBundle: currentBundle(t, kube, ns)},
			}
			_, err := asSA.CertificatesV1().ClusterTrustBundles().Create(ctx, b, metav1.CreateOptions{})
			return err
		}
	}
	current := func(get func() (string, error)) string {
		t.Helper()
		v, err := get()
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	trustCABundle := current(func() (string, error) {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "trust", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return cm.Data["ca.crt"], nil
	})
	webhookCABundle := current(func() (string, error) {
		w, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "mf-rbac", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return base64.StdEncoding.EncodeToString(w.Webhooks[0].ClientConfig.CABundle), nil
	})
	attackerBundle := fmt.Sprintf("%q", base64.StdEncoding.EncodeToString([]byte(currentBundle(t, kube, ns))))

	// The policies of this change take effect once kube-apiserver's admission plugin has seen them.
	e2etest.Eventually(t, time.Minute, "the Secret and ClusterTrustBundle policies to take effect", func(ctx context.Context) (bool, error) {
		errSecret := certapiSecret(ns, "probe", corev1.SecretTypeOpaque, nil)(ctx)
		if errSecret == nil || !strings.Contains(errSecret.Error(), "certapi-secrets") {
			return false, nil
		}
		if !ctbServed {
			return true, nil
		}
		errCTB := ctb("probe", "", nil)(ctx)
		return errCTB != nil && strings.Contains(errCTB.Error(), "certapi-clustertrustbundles"), nil
	})

	cases := []struct {
		name string
		do   func(context.Context) error
		// refusal is what the refusal says; "" when certapi's ServiceAccount may make the write.
		refusal string
		// byRBAC: refused by RBAC (no such verb is granted), before any admission policy.
		byRBAC bool
		// ctb: a write of a ClusterTrustBundle, left out where kube-apiserver serves none.
		ctb bool
	}{
		// caBundle injection: only into objects that opted in before the write, never kube-root-ca.crt.
		{name: "caBundle of a webhook configuration that did not opt in",
			do:      jsonPatch(gvrVWC, "", "mf-stolen", `{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":`+attackerBundle+`}`),
			refusal: "opted in before the write"},
		{name: "opting a webhook configuration in and writing its caBundle at once",
			do: jsonPatch(gvrVWC, "", "mf-stolen", `{"op":"add","path":"/metadata/annotations","value":{"certapi.dev/inject-ca-bundle":"true"}}`,
				`{"op":"add","path":"/webhooks/0/clientConfig/caBundle","value":`+attackerBundle+`}`),
			refusal: "opted in before the write"},
		{name: "conversion caBundle of a CRD that did not opt in",
			do:      jsonPatch(gvrCRD, "", "mfstolens.example.com", `{"op":"add","path":"/spec/conversion/webhook/clientConfig/caBundle","value":`+attackerBundle+`}`),
			refusal: "opted in before the write"},
		{name: "ca.crt of a ConfigMap that did not opt in",
			do:      jsonPatch(gvrConfigMap, ns, "not-opted-in", `{"op":"replace","path":"/data/ca.crt","value":"the thief's CA"}`),
			refusal: "opted in before the write"},
		{name: "ca.crt of an opted-in kube-root-ca.crt",
			do:      jsonPatch(gvrConfigMap, ns, "kube-root-ca.crt", `{"op":"replace","path":"/data/ca.crt","value":"the thief's CA"}`),
			refusal: "kube-root-ca.crt"},
		// Secrets: only certapi's kind of Secret, only outside the refused namespaces, only its own fields.
		// Outside the namespaces that opted in to Secret delivery, RBAC refuses before any policy.
		{name: "a service-account-token Secret in kube-system",
			do: certapiSecret("kube-system", "stolen", corev1.SecretTypeServiceAccountToken, func(s *corev1.Secret) {
				s.Annotations = map[string]string{corev1.ServiceAccountNameKey: "default"}
				s.Data = nil
			}),
			byRBAC: true, refusal: `cannot create resource "secrets" in API group "" in the namespace "kube-system"`},
		{name: "certapi's own kind of Secret in kube-system",
			do: certapiSecret("kube-system", "stolen", corev1.SecretTypeTLS, nil), byRBAC: true, refusal: `in the namespace "kube-system"`},
		{name: "certapi's own kind of Secret in kube-public",
			do: certapiSecret("kube-public", "stolen", corev1.SecretTypeTLS, nil), byRBAC: true, refusal: `in the namespace "kube-public"`},
		{name: "a Secret in certapi's own namespace (where its etcd TLS Secrets live)",
			do: certapiSecret(releaseNS, "certapi-etcd-server-tls", corev1.SecretTypeTLS, nil), refusal: "may not write Secrets in namespace " + releaseNS},
		{name: "a service-account-token Secret elsewhere",
			do: certapiSecret(ns, "stolen", corev1.SecretTypeServiceAccountToken, func(s *corev1.Secret) {
				s.Annotations[corev1.ServiceAccountNameKey] = "default"
				s.Data = nil
			}),
			refusal: "only Secrets of type kubernetes.io/tls"},
		{name: "an Opaque Secret", do: certapiSecret(ns, "stolen", corev1.SecretTypeOpaque, nil), refusal: "only Secrets of type kubernetes.io/tls"},
		{name: "a TLS Secret without certapi's label",
			do: certapiSecret(ns, "stolen", corev1.SecretTypeTLS, func(s *corev1.Secret) { s.Labels = nil }), refusal: "labelled certapi.dev/managed=true"},
		{name: "a TLS Secret without the request's UID",
			do: certapiSecret(ns, "stolen", corev1.SecretTypeTLS, func(s *corev1.Secret) { delete(s.Annotations, uid) }), refusal: "certapi.dev/servingcertrequest-uid"},
		{name: "a TLS Secret with a key of its own",
			do: certapiSecret(ns, "stolen", corev1.SecretTypeTLS, func(s *corev1.Secret) { s.Data["token"] = []byte("x") }), refusal: "only with its own label, annotations and keys"},
		{name: "a TLS Secret with a label of its own",
			do: certapiSecret(ns, "stolen", corev1.SecretTypeTLS, func(s *corev1.Secret) { s.Labels["app"] = "web" }), refusal: "only with its own label, annotations and keys"},
		{name: "taking over a TLS Secret nobody handed to certapi",
			do: secretPatch(ns, "foreign-tls", map[string]any{
				"metadata": map[string]any{"labels": map[string]string{managed: "true"}, "annotations": map[string]string{request: "foreign-tls", uid: "0b3e4a1c-uid"}},
				"data":     map[string][]byte{"tls.crt": pemish, "tls.key": pemish}}),
			refusal: "handed to it"},
		{name: "moving a delivered Secret to another request",
			do:      secretPatch(ns, "webhook-tls", map[string]any{"metadata": map[string]any{"annotations": map[string]string{request: "other"}}}),
			refusal: "never change that annotation"},
		{name: "another key of a delivered Secret",
			do:      secretPatch(ns, "webhook-tls", map[string]any{"data": map[string][]byte{"token": []byte("x")}}),
			refusal: "another key of data"},
		{name: "another label of a handed-over Secret",
			do: secretPatch(ns, "handed-over", map[string]any{"metadata": map[string]any{
				"labels": map[string]any{managed: "true", "app": nil}, "annotations": map[string]string{uid: "5d1f-uid"}}}),
			refusal: "another label"},
		{name: "another annotation of a handed-over Secret",
			do: secretPatch(ns, "handed-over", map[string]any{"metadata": map[string]any{
				"labels": map[string]string{managed: "true"}, "annotations": map[string]string{uid: "5d1f-uid", "example.com/owner": "thief"}}}),
			refusal: "another annotation"},
		{name: "deleting a delivered Secret",
			do: func(ctx context.Context) error {
				return asSA.CoreV1().Secrets(ns).Delete(ctx, "webhook-tls", metav1.DeleteOptions{})
			},
			byRBAC: true, refusal: "cannot delete resource"},
		// ClusterTrustBundles: only certapi's own.
		{name: "a ClusterTrustBundle of any name", do: ctb("stolen", "", nil), refusal: "only the ClusterTrustBundle certapi.dev:serving:ca", ctb: true},
		{name: "another ClusterTrustBundle of certapi's signer", do: ctb("certapi.dev:serving:stolen", signer, nil), refusal: "only the ClusterTrustBundle certapi.dev:serving:ca", ctb: true},
		{name: "a label on certapi's ClusterTrustBundle", ctb: true,
			do: func(ctx context.Context) error {
				_, err := asSA.CertificatesV1().ClusterTrustBundles().Patch(ctx, ctbName, types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
				return err
			},
			refusal: "only spec.trustBundle"},
		{name: "deleting certapi's ClusterTrustBundle", ctb: true,
			do: func(ctx context.Context) error {
				return asSA.CertificatesV1().ClusterTrustBundles().Delete(ctx, ctbName, metav1.DeleteOptions{})
			},
			byRBAC: true, refusal: "cannot delete resource"},

		// What certapi writes still passes.
		{name: "certapi: caBundle of an opted-in webhook configuration",
			do: jsonPatch(gvrVWC, "", "mf-rbac", `{"op":"replace","path":"/webhooks/0/clientConfig/caBundle","value":`+webhookCABundle+`}`)},
		{name: "certapi: ca.crt of an opted-in ConfigMap",
			do: jsonPatch(gvrConfigMap, ns, "trust", `{"op":"replace","path":"/data/ca.crt","value":`+trustCABundle+`}`)},
		{name: "certapi: a new managed TLS Secret", do: certapiSecret(ns, "delivered", corev1.SecretTypeTLS, nil)},
		{name: "certapi: renewing it",
			do: secretPatch(ns, "delivered", map[string]any{
				"metadata": map[string]any{"labels": map[string]string{managed: "true"}, "annotations": map[string]string{request: "delivered", uid: "0b3e4a1c-uid", serial: "02"}},
				"data":     map[string][]byte{"tls.crt": append(pemish, '\n'), "tls.key": pemish, "ca.crt": pemish}})},
		{name: "certapi: renewing it for `kubectl certapi renew` (recording the renew-requested-at it answers)",
			do: secretPatch(ns, "delivered", map[string]any{
				"metadata": map[string]any{"annotations": map[string]string{serial: "05", "certapi.dev/renew-requested-at": "2026-12-06T22:05:53.602157357Z"}},
				"data":     map[string][]byte{"tls.crt": pemish, "tls.key": pemish, "ca.crt": pemish}})},
		{name: "certapi: adopting the Secret of an earlier request of the same name (another UID)",
			do: secretPatch(ns, "delivered", map[string]any{
				"metadata": map[string]any{"annotations": map[string]string{uid: "7e2a-uid-of-the-request-applied-again", serial: "04"}},
				"data":     map[string][]byte{"tls.crt": pemish, "tls.key": pemish, "ca.crt": pemish}})},
		{name: "certapi: adopting a handed-over Secret, leaving the chart's label, annotation and key",
			do: secretPatch(ns, "handed-over", map[string]any{
				"metadata": map[string]any{"labels": map[string]string{managed: "true"}, "annotations": map[string]string{request: "handed-over", uid: "5d1f-uid", serial: "03"}},
				"data":     map[string][]byte{"tls.crt": pemish, "tls.key": pemish, "ca.crt": pemish}})},
		{name: "certapi: its own ClusterTrustBundle", ctb: true,
			do: func(ctx context.Context) error {
				_, err := asSA.CertificatesV1().ClusterTrustBundles().Patch(ctx, ctbName, types.JSONPatchType,
					[]byte(`[{"op":"replace","path":"/spec/trustBundle","value":`+fmt.Sprintf("%q", currentBundle(t, kube, ns))+`}]`), metav1.PatchOptions{})
				return err
			}},
	}
	for _, tc := range cases {
		if tc.ctb && !ctbServed {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do(ctx)
			switch {
			case tc.refusal == "":
				if err != nil {
					t.Fatalf("certapi's ServiceAccount may no longer make a write certapi makes: %v", err)
				}
			case tc.byRBAC:
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.refusal) {
					t.Fatalf("certapi's ServiceAccount: %v; want 403 from RBAC saying %q", err, tc.refusal)
				}
			default:
				if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy") || !strings.Contains(err.Error(), tc.refusal) {
					t.Fatalf("certapi's ServiceAccount: %v; want 403 from the policy that says %q", err, tc.refusal)
				}
			}
		})
	}

	// The adoption left the chart's own label, annotation and key alone.
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, "handed-over", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Labels["app"] != "web" || s.Annotations["example.com/owner"] != "chart" || string(s.Data["extra"]) != "chart" || s.Labels[managed] != "true" {
		t.Errorf("Secret handed-over after certapi adopted it: labels %v, annotations %v, extra %q", s.Labels, s.Annotations, s.Data["extra"])
	}
	// Reads are what the policies cannot bound (admission sees no reads): RBAC does. The token reads no
	// Secret outside the namespaces that opted in to Secret delivery and the peer CA Secret by name, as
	// the chart's rbac.yaml and the docs say.
	if _, err := asSA.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("certapi's ServiceAccount lists kube-system's Secrets (%v); the docs say it cannot", err)
	}
}

// currentBundle returns certapi's trust bundle, as it injected it into the ConfigMap trust of ns (which
// every Kubernetes minor serves, unlike its ClusterTrustBundle).
func currentBundle(t *testing.T, kube kubernetes.Interface, ns string) string {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(context.Background(), "trust", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["ca.crt"] == "" {
		t.Fatalf("ConfigMap %s/trust holds no ca.crt", ns)
	}
	return cm.Data["ca.crt"]
}

// checkQuotaStatusOnly runs on the control plane of TestManifestsRBACRunsCertapi, where the base manifests'
// RBAC and ValidatingAdmissionPolicies are applied for real and certapi runs as its ServiceAccount (sa).
// certapi's ResourceQuota admission still counts ServingCertRequests into a quota that also limits pods,
// memory and CPU, and refuses the one past it, through the policy certapi-resourcequota-status; as that
// ServiceAccount every other change of a quota's status is refused, each by the rule that says why; and
// the same changes by kube-controller-manager's quota controller are not.
func checkQuotaStatusOnly(t *testing.T, own *framework.ControlPlane, sa *rest.Config) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	_, asSA := testhelpers.Clients(t, sa)
	// kube-controller-manager's quota controller writes status as this ServiceAccount (its bootstrap RBAC,
	// system:controller:resourcequota-controller, comes with kube-apiserver).
	controllerConfig, err := own.UserConfig("system:serviceaccount:kube-system:resourcequota-controller", "system:serviceaccounts", "system:serviceaccounts:kube-system")
	if err != nil {
		t.Fatal(err)
	}
	_, asController := testhelpers.Clients(t, controllerConfig)
	const scrCount = corev1.ResourceName("count/servingcertrequests.certapi.dev")
	q := resource.MustParse
	// newQuota creates quota name in ns, with spec.hard and status.hard hard and status.used used, as
	// kube-controller-manager would have filled them (none runs here).
	newQuota := func(t *testing.T, ns, name string, hard, used corev1.ResourceList) {
		t.Helper()
		rq, err := kube.CoreV1().ResourceQuotas(ns).Create(ctx, &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.ResourceQuotaSpec{Hard: hard},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rq.Status = corev1.ResourceQuotaStatus{Hard: hard, Used: used}
		if _, err := kube.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, rq, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// updateStatus reads quota name as client and writes its status back changed by mutate, at the
	// resourceVersion it read, as the quota admission plugin and the quota controller do. It reads with a
	// list, as their informers do: certapi's ServiceAccount may list and watch quotas, not get one.
	updateStatus := func(client kubernetes.Interface, ns, name string, mutate func(*corev1.ResourceQuota)) error {
		list, err := client.CoreV1().ResourceQuotas(ns).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d ResourceQuotas named %s", len(list.Items), name)
		}
		rq := &list.Items[0]
		mutate(rq)
		_, err = client.CoreV1().ResourceQuotas(ns).UpdateStatus(ctx, rq, metav1.UpdateOptions{})
		return err
	}
	// A quota like those kube-apiserver's own quota plugin counts into: other resources beside certapi's,
	// in several formats.
	hard := corev1.ResourceList{scrCount: q("3"), corev1.ResourcePods: q("10"), corev1.ResourceRequestsMemory: q("1Gi"), corev1.ResourceRequestsCPU: q("2")}
	used := corev1.ResourceList{scrCount: q("1"), corev1.ResourcePods: q("3"), corev1.ResourceRequestsMemory: q("512Mi"), corev1.ResourceRequestsCPU: q("500m")}

	// The policy takes effect once kube-apiserver's admission plugin has seen it. The probe raises pods
	// used by one each time, so that each try is a change; its quota limits only pods, so that a change
	// that went through before would count nothing here.
	ns := e2etest.Namespace(t, kube)
	newQuota(t, ns, "probe", corev1.ResourceList{corev1.ResourcePods: q("1000")}, corev1.ResourceList{corev1.ResourcePods: q("0")})
	testhelpers.WaitFor(t, 100*time.Millisecond, time.Minute, "the ResourceQuota status policy to take effect", func(ctx context.Context) (bool, string) {
		err := updateStatus(asSA, ns, "probe", func(rq *corev1.ResourceQuota) {
			pods := rq.Status.Used[corev1.ResourcePods]
			pods.Add(q("1"))
			rq.Status.Used[corev1.ResourcePods] = pods
		})
		if err != nil && strings.Contains(err.Error(), "certapi-resourcequota-status") {
			return true, ""
		}
		return false, fmt.Sprintf("raising pods used as certapi's ServiceAccount: %v", err)
	})

	// certapi's own quota enforcement goes through the policy: each admitted create raises the count (the
	// plugin's update of the whole status), the one past status.hard is refused, and the other entries
	// stay as they were. The quota comes before the namespace's first request (see TestTenantBounds).
	t.Run("certapi counts its requests into a quota that limits other resources too", func(t *testing.T) {
		certapiNS := e2etest.Namespace(t, kube)
		// A quota that certapi's quota informer has not seen yet limits nothing (as in kube-apiserver's
		// own quota admission), so the quota starts full, and the test goes on once a create is refused
		// by it; its status then goes down to used.
		full := used.DeepCopy()
		full[scrCount] = hard[scrCount]
		newQuota(t, certapiNS, "certs", hard, full)
		e2etest.Eventually(t, 30*time.Second, "certapi to enforce the new quota", func(ctx context.Context) (bool, error) {
			_, err := c.CertapiV1alpha1().ServingCertRequests(certapiNS).Create(ctx, e2etest.Request("probe", "svc"), metav1.CreateOptions{})
			if err == nil {
				// Not limited yet, so not counted either: removed, and tried again.
				return false, c.CertapiV1alpha1().ServingCertRequests(certapiNS).Delete(ctx, "probe", metav1.DeleteOptions{})
			}
			return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"), nil
		})
		if err := updateStatus(kube, certapiNS, "certs", func(rq *corev1.ResourceQuota) { rq.Status.Used = used.DeepCopy() }); err != nil {
			t.Fatal(err)
		}
		// Retried: certapi's quota informer may not have the quota's status yet ("status unknown") or
		// still have it full, or a write of it may race another (409), as with kube-apiserver's own quota
		// admission. None of these lets a request past the quota.
		create := func(name string, retryExceeded bool) error {
			var last error
			e2etest.Eventually(t, 30*time.Second, "an answer to creating "+name+" other than a conflict", func(ctx context.Context) (bool, error) {
				_, last = c.CertapiV1alpha1().ServingCertRequests(certapiNS).Create(ctx, e2etest.Request(name, "svc"), metav1.CreateOptions{})
				retry := apierrors.IsConflict(last) || (apierrors.IsForbidden(last) && strings.Contains(last.Error(), "status unknown for quota")) ||
					(retryExceeded && apierrors.IsForbidden(last) && strings.Contains(last.Error(), "exceeded quota"))
				return !retry, nil
			})
			return last
		}
		for _, name := range []string{"q1", "q2"} {
			if err := create(name, true); err != nil {
				t.Fatalf("creating %s under a quota of 3 holding 1: %v", name, err)
			}
		}
		err := create("one-too-many", false)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota") || !strings.Contains(err.Error(), string(scrCount)) {
			t.Fatalf("creating a request past the quota: %v; want 403 exceeded quota", err)
		}
		rq, err := kube.CoreV1().ResourceQuotas(certapiNS).Get(ctx, "certs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := used.DeepCopy()
		want[scrCount] = q("3")
		if !apiequality.Semantic.DeepEqual(rq.Status.Used, want) {
			t.Errorf("status.used %v after certapi counted two requests; want %v", rq.Status.Used, want)
		}
	})

	set := func(name corev1.ResourceName, v string) func(*corev1.ResourceQuota) {
		return func(rq *corev1.ResourceQuota) { rq.Status.Used[name] = q(v) }
	}
	cases := []struct {
		name   string
		mutate func(*corev1.ResourceQuota)
		// noOwnEntry: the quota limits other resources only.
		noOwnEntry bool
		// refusal is what the policy's refusal says; "" when certapi's ServiceAccount may make the change.
		refusal string
		// controllerToo: the same change by kube-controller-manager's quota controller must pass.
		controllerToo bool
	}{
		// The review's attacks: another resource's count at its hard, refusing every create it covers, or at 0.
		{name: "pods used at hard", mutate: set(corev1.ResourcePods, "10"), refusal: "another entry of status.used", controllerToo: true},
		{name: "pods used at 0", mutate: set(corev1.ResourcePods, "0"), refusal: "another entry of status.used", controllerToo: true},
		{name: "an unrelated entry added", mutate: set("count/secrets", "0"), refusal: "another entry of status.used", controllerToo: true},
		{name: "another entry removed", mutate: func(rq *corev1.ResourceQuota) { delete(rq.Status.Used, corev1.ResourceRequestsCPU) },
			refusal: "another entry of status.used", controllerToo: true},
		// Entries compare as the canonical strings CEL sees: the same value in another format is a change.
		{name: "memory used, the same value in another format", mutate: set(corev1.ResourceRequestsMemory, "536870912"), refusal: "another entry of status.used"},
		{name: "status.hard of pods", mutate: func(rq *corev1.ResourceQuota) { rq.Status.Hard[corev1.ResourcePods] = q("1000") },
			refusal: "status.hard or the spec", controllerToo: true},
		{name: "status.hard of certapi's own entry", mutate: func(rq *corev1.ResourceQuota) { rq.Status.Hard[scrCount] = q("100") },
			refusal: "status.hard or the spec"},
		{name: "a finalizer", mutate: func(rq *corev1.ResourceQuota) { rq.Finalizers = append(rq.Finalizers, "example.com/hold") },
			refusal: "finalizers"},
		// certapi's own count: only raised, and not past status.hard.
		{name: "certapi's count at 0, letting a tenant past its quota", mutate: set(scrCount, "0"), refusal: "may only raise", controllerToo: true},
		{name: "certapi's count past status.hard", mutate: set(scrCount, "4"), refusal: "may only raise"},
		{name: "certapi's count removed", mutate: func(rq *corev1.ResourceQuota) { delete(rq.Status.Used, scrCount) }, refusal: "may only raise"},
		{name: "certapi's count added to a quota that does not limit it", noOwnEntry: true, mutate: set(scrCount, "1"), refusal: "may only raise"},
		{name: "certapi's count and pods together", mutate: func(rq *corev1.ResourceQuota) {
			rq.Status.Used[scrCount], rq.Status.Used[corev1.ResourcePods] = q("2"), q("10")
		}, refusal: "another entry of status.used"},

		// What the quota plugin writes: the count raised by the creates it admits, up to status.hard, every
		// other entry as it read it.
		{name: "certapi: its count raised by one", mutate: set(scrCount, "2")},
		{name: "certapi: its count raised to status.hard by several creates at once", mutate: set(scrCount, "3")},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			qHard, qUsed := hard.DeepCopy(), used.DeepCopy()
			if tc.noOwnEntry {
				delete(qHard, scrCount)
				delete(qUsed, scrCount)
			}
			name := fmt.Sprintf("quota-%d", i)
			newQuota(t, ns, name, qHard, qUsed)
			err := updateStatus(asSA, ns, name, tc.mutate)
			if tc.refusal == "" {
				if err != nil {
					t.Fatalf("certapi's ServiceAccount may no longer write what the quota plugin writes: %v", err)
				}
				return
			}
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'certapi-resourcequota-status'") || !strings.Contains(err.Error(), tc.refusal) {
				t.Fatalf("certapi's ServiceAccount: %v; want 403 from the policy that says %q", err, tc.refusal)
			}
			if tc.controllerToo {
				// Other users are not affected: kube-controller-manager's recalculation sets any entry.
				if err := updateStatus(asController, ns, name, tc.mutate); err != nil {
					t.Fatalf("kube-controller-manager's quota controller may not make the same change: %v", err)
				}
			}
		})
	}
}
