package manifests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestManifestsRBACRunsCertapi runs certapi with exactly the permissions the manifests give its
// ServiceAccount, and the arguments of the base StatefulSet, on a control plane of its own (the RBAC is
// applied for real there): certapi must come up, serve itself so that kube-apiserver trusts it (which
// needs its APIService injected), deliver a Secret and inject caBundles, and never be told "forbidden".
// The base's ValidatingAdmissionPolicies apply too: certapi's injection and its quota admission's count
// pass them, and every change but a caBundle, or but that count, made with certapi's identity is refused. It also proves the encryption resource name the
// README gives, with --require-encrypted-ca-keys on as the base has it.
func TestManifestsRBACRunsCertapi(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err := e2etest.Run(t, e2etest.KubectlPath(t), "kustomize", filepath.Join(root, deployBase))
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", deployBase, err, errOut)
	}
	objs, err := framework.DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The base applied for real, certapi with the arguments of its StatefulSet.
	r := applyForCertapi(ctx, t, objs)
	own, saConfig, ownKubectl, args := r.own, r.sa, r.kubectl, r.args
	waitFor := func(what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
		t.Helper()
		r.waitFor(ctx, what, timeout, cond)
	}
	r.start(args)

	// 1. kube-apiserver trusts certapi: certapi injected its own CA into its APIService.
	r.waitAvailable(ctx)
	c, kube := testhelpers.Clients(t, own.AdminConfig)

	// 2. A Secret is delivered into a namespace that opted in, as docs/usage.md says: the label, and a
	// RoleBinding to the chart's ClusterRole certapi:secret-delivery.
	ns := e2etest.Namespace(t, kube)
	ownKubectl("create", "rolebinding", "certapi-secret-delivery", "-n", ns, "--clusterrole=certapi:secret-delivery", "--serviceaccount=certapi-system:certapi")
	ownKubectl("label", "namespace", ns, "certapi.dev/secret-delivery=enabled")
	scr := e2etest.Request("rbac", "webhook")
	scr.Spec.SecretName = "webhook-tls"
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, scr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("Secret webhook-tls", time.Minute, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "webhook-tls", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(s.Data["tls.crt"]) > 0, errors.New("no tls.crt yet")
	})

	// ... into a Secret a chart handed over (the admission policies let certapi adopt it, leaving the
	// chart's own label, annotation and key), and again, into the first, when the request's spec changes
	// (a patch of a Secret certapi manages).
	handed := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "chart-tls", Namespace: ns, Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"certapi.dev/servingcertrequest": "rbac-chart", "example.com/owner": "chart"}},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": nil, "tls.key": nil, "extra": []byte("chart")},
	}
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, handed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	chartReq := e2etest.Request("rbac-chart", "web")
	chartReq.Spec.SecretName = "chart-tls"
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, chartReq, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("Secret chart-tls adopted", time.Minute, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "chart-tls", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(s.Data["tls.crt"]) == 0 {
			return false, errors.New("no tls.crt yet")
		}
		if s.Labels["app"] != "web" || s.Annotations["example.com/owner"] != "chart" || string(s.Data["extra"]) != "chart" || s.Labels["certapi.dev/managed"] != "true" {
			return false, fmt.Errorf("adopted Secret: labels %v, annotations %v, extra %q", s.Labels, s.Annotations, s.Data["extra"])
		}
		return true, nil
	})
	delivered, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, scr.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delivered.Spec.DNSNames = []string{"webhook-alt." + ns + ".svc"}
	if delivered, err = c.CertapiV1alpha1().ServingCertRequests(ns).Update(ctx, delivered, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("Secret webhook-tls re-issued for the new spec", time.Minute, func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "webhook-tls", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		gen := s.Annotations["certapi.dev/generation"]
		return gen == strconv.FormatInt(delivered.Generation, 10), fmt.Errorf("issued for generation %q, want %d", gen, delivered.Generation)
	})

	// 3. caBundles are injected into a webhook configuration and a CRD that opt in.
	ownKubectl("apply", "-f", writeObjects(t, injectionTargets(t, ns)))
	waitFor("caBundle in ValidatingWebhookConfiguration mf-rbac", time.Minute, func(ctx context.Context) (bool, error) {
		w, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "mf-rbac", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(w.Webhooks[0].ClientConfig.CABundle) > 0, errors.New("no caBundle yet")
	})
	waitFor("caBundle in MutatingWebhookConfiguration mf-rbac", time.Minute, func(ctx context.Context) (bool, error) {
		w, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "mf-rbac", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(w.Webhooks[0].ClientConfig.CABundle) > 0, errors.New("no caBundle yet")
	})
	dyn, err := dynamic.NewForConfig(own.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	waitFor("conversion caBundle in CRD mfwidgets.example.com", time.Minute, func(ctx context.Context) (bool, error) {
		u, err := crds.Get(ctx, "mfwidgets.example.com", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		b, _, _ := unstructured.NestedString(u.Object, "spec", "conversion", "webhook", "clientConfig", "caBundle")
		return b != "", errors.New("no caBundle yet")
	})
	// 4. The signer-linked ClusterTrustBundle (create, and "attest" on the signer), where kube-apiserver
	// serves certificates.k8s.io/v1 ClusterTrustBundles (Kubernetes 1.37 or later), and an annotated
	// ConfigMap (read and patched in any namespace).
	if served, _ := testhelpers.Served(t, own.AdminConfig, "certificates.k8s.io/v1", "clustertrustbundles"); served {
		waitFor("ClusterTrustBundle certapi.dev:serving:ca", time.Minute, func(ctx context.Context) (bool, error) {
			b, err := kube.CertificatesV1().ClusterTrustBundles().Get(ctx, "certapi.dev:serving:ca", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return b.Spec.TrustBundle != "", errors.New("no trustBundle yet")
		})
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "trust", Namespace: ns, Annotations: map[string]string{"certapi.dev/inject-ca-bundle": "true"}}}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("ca.crt in ConfigMap trust", time.Minute, func(ctx context.Context) (bool, error) {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, "trust", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return cm.Data["ca.crt"] != "", errors.New("no ca.crt yet")
	})
	// Events go out asynchronously: wait until certapi's Event about the delivery is stored, so a refusal
	// of Event writes would be in the log by now.
	waitFor("certapi's Event on the delivered request", time.Minute, func(ctx context.Context) (bool, error) {
		evs, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Regarding.Kind == "ServingCertRequest" && e.Regarding.Name == scr.Name {
				return true, nil
			}
		}
		return false, errors.New("no Event yet")
	})

	// 5. The admission policies let certapi's ServiceAccount change caBundle fields and nothing else
	// (certapi's own writes above went through them), and leave other users alone.
	injected, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "mf-rbac", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("certapi's ServiceAccount may change only caBundle fields", func(t *testing.T) {
		checkCABundleOnly(t, own, saConfig, ns)
	})
	t.Run("no one scales the StatefulSet from several members to one", func(t *testing.T) {
		checkKeepEtcdQuorum(t, own)
	})
	// The caBundle the ServiceAccount changed there is drift to certapi: it puts its own back, through
	// the policies.
	waitFor("certapi to restore the caBundle of ValidatingWebhookConfiguration mf-rbac", time.Minute, func(ctx context.Context) (bool, error) {
		w, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "mf-rbac", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return bytes.Equal(w.Webhooks[0].ClientConfig.CABundle, injected.Webhooks[0].ClientConfig.CABundle), errors.New("not restored yet")
	})

	// 6. Secret delivery only where a namespace opted in, and reads only of what certapi needs.
	t.Run("a request with secretName in a namespace not opted in is refused", func(t *testing.T) {
		checkNotOptedInRefused(t, c, kube)
	})
	t.Run("certapi's ServiceAccount cannot read kube-system's Secrets nor the encryption configuration", func(t *testing.T) {
		checkSecretReads(t, kube, saConfig, ns)
	})

	r.checkNeverForbidden()
	if !strings.Contains(r.log(), "CA private keys are encrypted at rest") {
		t.Errorf("with an EncryptionConfiguration that lists certificateauthoritykeys.certapi.dev (the name the README gives), certapi does not say the CA keys are encrypted")
	}

	// 7. A namespace labelled without the RoleBinding: the request says kube-apiserver refuses certapi
	// there, and what to do (after the log was read: certapi is told "forbidden" there, as it should be).
	t.Run("a namespace labelled without the RoleBinding is reported", func(t *testing.T) {
		checkLabelledWithoutRoleBinding(t, c, kube, ownKubectl)
	})

	// 8. A stolen token: after the log was read, because an opted-in kube-root-ca.crt among its targets is
	// one certapi's injector may itself try to write (and be refused).
	t.Run("a stolen token of certapi's ServiceAccount", func(t *testing.T) {
		checkStolenToken(t, own, saConfig, ns)
	})

	// 9. ResourceQuota status: certapi's quota admission counts its requests through the policy that
	// lets its ServiceAccount change nothing else of a quota (after the log was read: a create refused
	// past the quota is a 403 certapi may log).
	t.Run("certapi's ServiceAccount may only count its requests into a ResourceQuota", func(t *testing.T) {
		checkQuotaStatusOnly(t, own, saConfig)
	})

	// 10. secretDelivery.scope cluster, asked for by name: the chart's ClusterRoleBinding and
	// --secret-delivery-scope=cluster deliver into a namespace that did not opt in.
	// Not a subtest: it restarts certapi, which waitFor watches for the whole test.
	{
		ownKubectl("apply", "-f", writeObjects(t, clusterScopeBinding(t, root)))
		r.stop()
		var clusterArgs []string
		for _, a := range args {
			if flagName(a) == "secret-delivery-scope" {
				a = "--secret-delivery-scope=cluster"
			}
			clusterArgs = append(clusterArgs, a)
		}
		r.start(clusterArgs)
		anyNS := e2etest.Namespace(t, kube)
		req := e2etest.Request("anywhere", "web")
		req.Spec.SecretName = "web-tls"
		waitFor("the request in a namespace that did not opt in to be admitted", 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, err := c.CertapiV1alpha1().ServingCertRequests(anyNS).Create(ctx, req, metav1.CreateOptions{})
			return err == nil, err
		})
		waitFor("Secret web-tls in a namespace that did not opt in", time.Minute, func(ctx context.Context) (bool, error) {
			s, err := kube.CoreV1().Secrets(anyNS).Get(ctx, "web-tls", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			return len(s.Data["tls.crt"]) > 0, errors.New("no tls.crt yet")
		})
	}
}

// clusterScopeBinding renders the chart's RBAC with secretDelivery.scope=cluster, as the base is rendered
// (hack/manifests/plain-values.yaml), and returns its ClusterRoleBinding certapi:secret-delivery.
func clusterScopeBinding(t *testing.T, root string) []*unstructured.Unstructured {
	t.Helper()
	helm, err := framework.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	out, errOut, err := e2etest.Run(t, helm, "template", "certapi", filepath.Join(root, "artifacts/charts/certapi"), "-n", "certapi-system",
		"-f", filepath.Join(root, "hack/manifests/plain-values.yaml"), "--set", "secretDelivery.scope=cluster", "--show-only", "templates/rbac.yaml")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, errOut)
	}
	objs, err := framework.DecodeManifests(out)
	if err != nil {
		t.Fatal(err)
	}
	binding := findObject(t, objs, "ClusterRoleBinding", "", "certapi:secret-delivery")
	return []*unstructured.Unstructured{binding}
}

// checkNotOptedInRefused: in the default scope a request that asks for a Secret in a namespace that has
// not opted in is refused at admission (403), saying how to opt in; one without secretName is admitted.
func checkNotOptedInRefused(t *testing.T, c versioned.Interface, kube kubernetes.Interface) {
	ctx := context.Background()
	ns := e2etest.Namespace(t, kube)
	req := e2etest.Request("refused", "web")
	req.Spec.SecretName = "web-tls"
	_, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a request with secretName in namespace %s, which has not opted in: %v; want 403", ns, err)
	}
	for _, want := range []string{
		fmt.Sprintf("namespace %q has not opted in to Secret delivery", ns),
		"kubectl label namespace " + ns + " certapi.dev/secret-delivery=enabled",
		"kubectl create rolebinding certapi-secret-delivery -n " + ns + " --clusterrole=certapi:secret-delivery --serviceaccount=certapi-system:certapi",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	req.Spec.SecretName = ""
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Errorf("a request without secretName in a namespace that has not opted in: %v", err)
	}
}

// checkSecretReads asks kube-apiserver (SubjectAccessReviews, and a real list as the ServiceAccount)
// what certapi's ServiceAccount may read: no Secret of kube-system, not the EncryptionConfiguration
// Secret of its own namespace, no list of that namespace's Secrets, nothing in a namespace that has not
// opted in; only the etcd peer CA Secret by name, and the Secrets of an opted-in namespace.
func checkSecretReads(t *testing.T, kube kubernetes.Interface, sa *rest.Config, optedIn string) {
	ctx := context.Background()
	other := e2etest.Namespace(t, kube)
	const user = "system:serviceaccount:certapi-system:certapi"
	for _, tc := range []struct {
		verb, namespace, name string
		allowed               bool
	}{
		{verb: "list", namespace: "kube-system"},
		{verb: "watch", namespace: "kube-system"},
		{verb: "get", namespace: "kube-system"},
		{verb: "get", namespace: "kube-system", name: "extension-apiserver-authentication"},
		{verb: "get", namespace: "certapi-system", name: "certapi-encryption-config"},
		{verb: "list", namespace: "certapi-system"},
		{verb: "watch", namespace: "certapi-system"},
		{verb: "get", namespace: other},
		{verb: "list", namespace: other},
		{verb: "create", namespace: other},
		{verb: "get", namespace: "certapi-system", name: "certapi-etcd-peer-ca", allowed: true},
		{verb: "list", namespace: "certapi-system", name: "certapi-etcd-peer-ca", allowed: true},
		{verb: "list", namespace: optedIn, allowed: true},
		{verb: "create", namespace: optedIn, allowed: true},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:serviceaccounts:certapi-system", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: tc.namespace, Verb: tc.verb, Resource: "secrets", Name: tc.name},
		}}
		got, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.allowed {
			t.Errorf("certapi's ServiceAccount: %s secrets %q in namespace %s: allowed %v, want %v (%s)",
				tc.verb, tc.name, tc.namespace, got.Status.Allowed, tc.allowed, got.Status.Reason)
		}
	}
	_, asSA := testhelpers.Clients(t, sa)
	if _, err := asSA.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("certapi's ServiceAccount lists kube-system's Secrets: %v; want 403", err)
	}
	if _, err := asSA.CoreV1().Secrets("certapi-system").Get(ctx, "certapi-encryption-config", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("certapi's ServiceAccount reads the encryption configuration: %v; want 403", err)
	}
}

// checkLabelledWithoutRoleBinding: a namespace that carries the label but no RoleBinding admits the
// request, and certapi reports on it that kube-apiserver refuses it access there (Ready=False, reason
// SecretAccessForbidden, with the RoleBinding to create), and writes nothing; the RoleBinding created,
// the Secret is delivered.
func checkLabelledWithoutRoleBinding(t *testing.T, c versioned.Interface, kube kubernetes.Interface, kubectl func(args ...string) string) {
	ctx := context.Background()
	ns := e2etest.Namespace(t, kube)
	kubectl("label", "namespace", ns, "certapi.dev/secret-delivery=enabled")
	req := e2etest.Request("locked", "web")
	req.Spec.SecretName = "web-tls"
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, time.Minute, "Ready=False, SecretAccessForbidden", func(ctx context.Context) (bool, error) {
		r, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "locked", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(r.Status.Conditions, "Ready")
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "SecretAccessForbidden" &&
			strings.Contains(cond.Message, "kubectl create rolebinding certapi-secret-delivery -n "+ns), nil
	})
	kubectl("create", "rolebinding", "certapi-secret-delivery", "-n", ns, "--clusterrole=certapi:secret-delivery", "--serviceaccount=certapi-system:certapi")
	e2etest.Eventually(t, 2*time.Minute, "the Secret once the RoleBinding exists", func(ctx context.Context) (bool, error) {
		s, err := kube.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && len(s.Data["tls.crt"]) > 0, err
	})
}

// injectionTargets returns a validating and a mutating webhook configuration and a CRD that opt in to
// injection; their webhooks match nothing that exists, so they block nothing.
func injectionTargets(t *testing.T, ns string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := framework.DecodeManifests([]byte(`
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: mf-rbac
  annotations:
    certapi.dev/inject-ca-bundle: "true"
webhooks:
- name: mf-rbac.example.com
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
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: mf-rbac
  annotations:
    certapi.dev/inject-ca-bundle: "true"
webhooks:
- name: mf-rbac.example.com
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig:
    service: {name: webhook, namespace: ` + ns + `, path: /mutate}
  rules:
  - apiGroups: ["example.com"]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["nothings"]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: mfwidgets.example.com
  annotations:
    certapi.dev/inject-ca-bundle: "true"
spec:
  group: example.com
  names: {kind: MfWidget, plural: mfwidgets, singular: mfwidget, listKind: MfWidgetList}
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
`))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func aggregator(t *testing.T, own *framework.ControlPlane) aggregatorclient.Interface {
	t.Helper()
	a, err := aggregatorclient.NewForConfig(own.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
