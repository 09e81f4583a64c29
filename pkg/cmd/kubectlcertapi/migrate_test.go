package kubectlcertapi

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
)

func TestMapCertificate(t *testing.T) {
	for _, tc := range []struct {
		name     string
		c        cmCertificate
		service  string
		dnsNames []string
		duration string
		problem  string
	}{
		{name: "the service's own names", c: cmCertificate{Namespace: "ns", DNSNames: []string{"hook.ns.svc", "hook.ns.svc.cluster.local"}, Duration: "2160h0m0s"},
			service: "hook", duration: "2160h0m0s"},
		{name: "a wildcard first, and another Service of the namespace", c: cmCertificate{Namespace: "ns", DNSNames: []string{"*.hook.ns.svc", "hook.ns.svc", "other.ns.svc"}},
			service: "hook", dnsNames: []string{"*.hook.ns.svc", "other.ns.svc"}},
		{name: "a duration out of certapi's range is left to the default", c: cmCertificate{Namespace: "ns", DNSNames: []string{"hook.ns.svc"}, Duration: "8760h"},
			service: "hook"},
		{name: "a name outside the namespace", c: cmCertificate{Namespace: "ns", DNSNames: []string{"hook.ns.svc", "hook.other.svc"}}, problem: `"hook.other.svc"`},
		{name: "a short name", c: cmCertificate{Namespace: "ns", DNSNames: []string{"hook"}}, problem: `"hook"`},
		{name: "an external name", c: cmCertificate{Namespace: "ns", DNSNames: []string{"hook.example.com"}}, problem: "certapi issues only"},
		{name: "IP addresses", c: cmCertificate{Namespace: "ns", DNSNames: []string{"hook.ns.svc"}, Unsupported: []string{"spec.ipAddresses"}}, problem: "spec.ipAddresses"},
		{name: "only a wildcard", c: cmCertificate{Namespace: "ns", DNSNames: []string{"*.hook.ns.svc"}}, problem: "only wildcards"},
		{name: "no names", c: cmCertificate{Namespace: "ns"}, problem: "no dnsNames"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mapCertificate(tc.c, "cluster.local")
			if (tc.problem == "") != (m.problem == "") || !strings.Contains(m.problem, tc.problem) {
				t.Fatalf("problem = %q, want one containing %q", m.problem, tc.problem)
			}
			if tc.problem != "" {
				return
			}
			if m.service != tc.service || strings.Join(m.dnsNames, ",") != strings.Join(tc.dnsNames, ",") || m.duration != tc.duration {
				t.Fatalf("mapped to service %q, dnsNames %q, duration %q; want %q, %q, %q", m.service, m.dnsNames, m.duration, tc.service, tc.dnsNames, tc.duration)
			}
		})
	}
}

func TestWritePlan(t *testing.T) {
	certs := []cmCertificate{
		{Namespace: "hooks", Name: "hook-cert", SecretName: "hook-tls", DNSNames: []string{"hook.hooks.svc", "hook.hooks.svc.cluster.local"}},
		{Namespace: "hooks", Name: "ip-cert", SecretName: "ip-tls", DNSNames: []string{"ip.hooks.svc"}, Unsupported: []string{"spec.ipAddresses"}},
	}
	targets := []injectTarget{
		{Resource: "validatingwebhookconfiguration", Name: "hook", Annotations: map[string]string{cmInjectCAFrom: "hooks/hook-cert"}},
		{Resource: "customresourcedefinition", Name: "widgets.example.com", Annotations: map[string]string{cmInjectCAFromSecret: "hooks/hook-tls"}},
		{Resource: "mutatingwebhookconfiguration", Name: "ip", Annotations: map[string]string{cmInjectCAFrom: "hooks/ip-cert"}},
		{Resource: "apiservice", Name: "v1.metrics.example.com", Annotations: map[string]string{cmInjectAPIServerCA: "true"}},
		{Resource: "validatingwebhookconfiguration", Name: "gone", Annotations: map[string]string{cmInjectCAFrom: "hooks/missing"}},
	}
	var out strings.Builder
	if err := writePlan(&out, certs, targets, "cluster.local"); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	inOrder := []string{
		"kubectl create servingcertrequest hook -n hooks --service=hook --secret=hook-tls-certapi --wait\n",
		"kubectl annotate customresourcedefinition widgets.example.com certapi.dev/inject-ca-bundle=true certapi.dev/keep-foreign-ca=true\n",
		"kubectl annotate validatingwebhookconfiguration hook certapi.dev/inject-ca-bundle=true certapi.dev/keep-foreign-ca=true\n",
		"kubectl annotate customresourcedefinition widgets.example.com cert-manager.io/inject-ca-from-secret-\n",
		"kubectl annotate validatingwebhookconfiguration hook cert-manager.io/inject-ca-from-\n",
		"mount hook-tls-certapi instead",
		"kubectl certapi inspect customresourcedefinition/widgets.example.com\n",
		"kubectl certapi inspect validatingwebhookconfiguration/hook\n",
		"kubectl annotate validatingwebhookconfiguration hook certapi.dev/keep-foreign-ca-\n",
		"kubectl delete certificate hook-cert -n hooks\n",
		"kubectl delete secret hook-tls -n hooks\n",
		"# Not in the plan:",
	}
	rest := got
	for _, want := range inOrder {
		i := strings.Index(rest, want)
		if i < 0 {
			t.Fatalf("the plan lacks (or misorders) %q:\n%s", want, got)
		}
		rest = rest[i+len(want):]
	}
	for _, want := range []string{
		"apiservice v1.metrics.example.com: cert-manager.io/inject-apiserver-ca injects kube-apiserver's own CA",
		"mutatingwebhookconfiguration ip: Certificate hooks/ip-cert cannot become a ServingCertRequest: it sets spec.ipAddresses",
		"validatingwebhookconfiguration gone: cert-manager.io/inject-ca-from names Certificate hooks/missing, which does not exist",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the plan does not say %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "kubectl create servingcertrequest"); n != 1 {
		t.Errorf("%d ServingCertRequests for one Certificate injected into two objects:\n%s", n, got)
	}
	for _, never := range []string{"annotate mutatingwebhookconfiguration ip", "annotate apiservice", "annotate validatingwebhookconfiguration gone"} {
		if strings.Contains(got, never) {
			t.Errorf("the plan touches an object it cannot migrate (%q):\n%s", never, got)
		}
	}

	out.Reset()
	if err := writePlan(&out, nil, nil, "cluster.local"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Nothing to migrate") || strings.Contains(out.String(), "kubectl annotate") {
		t.Errorf("an empty cluster's plan:\n%s", out.String())
	}
}

func TestReadMigration(t *testing.T) {
	cert := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": "hook-cert", "namespace": "hooks"},
		"spec": map[string]any{"secretName": "hook-tls", "dnsNames": []any{"hook.hooks.svc"}, "commonName": "hook.hooks.svc.cluster.local",
			"duration": "720h", "uris": []any{"spiffe://x"}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{certificatesGVR: "CertificateList"}, cert)
	scheme := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	obj := func(apiVersion, kind, name string, ann map[string]string) runtime.Object {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}, ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}
	}
	meta := metadatafake.NewSimpleMetadataClient(scheme,
		obj("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "hook", map[string]string{cmInjectCAFrom: "hooks/hook-cert", "other": "x"}),
		obj("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "plain", nil),
		obj("apiregistration.k8s.io/v1", "APIService", "v1.x", map[string]string{cmInjectAPIServerCA: "true"}),
	)
	certs, targets, err := readMigration(context.Background(), dyn, meta)
	if err != nil {
		t.Fatal(err)
	}
	if len(certs) != 1 || certs[0].SecretName != "hook-tls" || certs[0].Duration != "720h" ||
		strings.Join(certs[0].DNSNames, ",") != "hook.hooks.svc,hook.hooks.svc.cluster.local" || strings.Join(certs[0].Unsupported, ",") != "spec.uris" {
		t.Fatalf("certificates = %+v", certs)
	}
	if len(targets) != 2 {
		t.Fatalf("targets = %+v, want the two annotated objects", targets)
	}
	for _, tg := range targets {
		if _, ok := tg.Annotations["other"]; ok {
			t.Errorf("target %s keeps an annotation that is not cert-manager's: %v", tg.Name, tg.Annotations)
		}
	}
}
