package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission/plugin/policy/validating"
	"k8s.io/apiserver/pkg/cel/openapi/resolver"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
)

var (
	gvrVWC        = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}
	gvrMWC        = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}
	gvrCRD        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	gvrAPIService = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	gvrConfigMap  = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

// mfCheckCABundleOnly runs on the control plane of TestManifestsRBACRunsCertapi, where the base manifests
// (policies included) are applied for real and certapi has injected its bundle, under those policies, into
// the ValidatingWebhookConfiguration mf-rbac, the MutatingWebhookConfiguration mf-rbac, the CRD
// mfwidgets.example.com, its own APIService and the ConfigMap trust of namespace ns. As certapi's
// ServiceAccount (sa), every change but a caBundle is refused by kube-apiserver; the same changes by
// another user are not.
func mfCheckCABundleOnly(t *testing.T, own *framework.ControlPlane, sa *rest.Config, ns string) {
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

// mfTypeCheckPolicies type-checks every ValidatingAdmissionPolicy in objs against the schemas kube-apiserver
// serves for the kinds it matches, as kube-controller-manager does to fill in status.typeChecking (no
// kube-controller-manager runs here): a misspelt field is a warning there, and an error on every request
// at run time.
func mfTypeCheckPolicies(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	_, kube := e2etest.Clients(t, cp.AdminConfig)
	checker := &validating.TypeChecker{
		SchemaResolver: &resolver.ClientDiscoveryResolver{Discovery: kube.Discovery()},
		RestMapper:     restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kube.Discovery())),
	}
	n := 0
	for _, u := range mfOfKind(objs, "ValidatingAdmissionPolicy") {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		mfConvert(t, u, &p)
		n++
		// The checker skips a kind whose schema it cannot resolve, silently: make sure it resolved every
		// kind the policy matches, by a field that no kind has.
		kinds := 0
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			kinds += len(r.Resources)
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
