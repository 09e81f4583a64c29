package kubectlcertapi

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	"k8s.io/utils/ptr"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/servedcert"
	"github.com/certapi/certapi/pkg/signer"
)

// TestParseInspectTarget: inspect takes TYPE/NAME or TYPE NAME with the names kubectl users type, and
// says what it accepts otherwise.
func TestParseInspectTarget(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		want    InspectTarget
		wantErr []string
	}{
		{args: []string{"validatingwebhookconfiguration/hook"}, want: InspectTarget{kindValidatingWebhookConfiguration, "hook"}},
		{args: []string{"ValidatingWebhookConfigurations/hook"}, want: InspectTarget{kindValidatingWebhookConfiguration, "hook"}},
		{args: []string{"validatingwebhookconfiguration.admissionregistration.k8s.io/hook"}, want: InspectTarget{kindValidatingWebhookConfiguration, "hook"}},
		{args: []string{"vwc", "hook"}, want: InspectTarget{kindValidatingWebhookConfiguration, "hook"}},
		{args: []string{"mutatingwebhookconfigurations", "m"}, want: InspectTarget{kindMutatingWebhookConfiguration, "m"}},
		{args: []string{"mwc/m"}, want: InspectTarget{kindMutatingWebhookConfiguration, "m"}},
		{args: []string{"crd/widgets.example.com"}, want: InspectTarget{kindCustomResourceDefinition, "widgets.example.com"}},
		{args: []string{"customresourcedefinitions.apiextensions.k8s.io/widgets.example.com"}, want: InspectTarget{kindCustomResourceDefinition, "widgets.example.com"}},
		{args: []string{"apiservice/v1.example.com"}, want: InspectTarget{kindAPIService, "v1.example.com"}},
		{args: []string{"APIServices.apiregistration.k8s.io", "v1.example.com"}, want: InspectTarget{kindAPIService, "v1.example.com"}},
		{args: []string{"secret", "tls"}, want: InspectTarget{kindSecret, "tls"}},
		{args: []string{"secret/tls"}, want: InspectTarget{kindSecret, "tls"}},

		{args: nil, wantErr: []string{"what to inspect is required", "validatingwebhookconfiguration/NAME (or vwc/NAME)", "crd/NAME", "apiservice/NAME", "secret NAME"}},
		{args: []string{"hook"}, wantErr: []string{`cannot inspect "hook"`, "TYPE/NAME or TYPE NAME"}},
		{args: []string{"deployment/hook"}, wantErr: []string{`cannot inspect a "deployment"`, "mutatingwebhookconfiguration/NAME (or mwc/NAME)", "apiservice/NAME"}},
		{args: []string{"vwc/"}, wantErr: []string{"the NAME after the TYPE"}},
		{args: []string{"vwc/a/b"}, wantErr: []string{"the NAME after the TYPE"}},
		{args: []string{"vwc/a", "b"}, wantErr: []string{"one object"}},
		{args: []string{"vwc", "a", "b"}, wantErr: []string{"one object"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got, err := ParseInspectTarget(tc.args)
			if len(tc.wantErr) == 0 {
				if err != nil || got != tc.want {
					t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("got %+v, want an error", got)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestServedSlots: the slots of each kind that name a Service, with the object's own caBundle and the
// default port, and a note for what names none.
func TestServedSlots(t *testing.T) {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{Webhooks: []admissionregistrationv1.ValidatingWebhook{
		{Name: "a.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "t", Name: "a"}, CABundle: []byte("A")}},
		{Name: "url.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://example.com")}},
		{Name: "b.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "t", Name: "b", Port: ptr.To(int32(8443))}}},
	}}
	slots, notes := servedSlots(vwc)
	if len(slots) != 2 || slots[0].webhook != "a.example.com" || slots[0].service != (servedcert.ServiceRef{Namespace: "t", Name: "a", Port: 443}) ||
		string(slots[0].caBundle) != "A" || slots[1].service.Port != 8443 {
		t.Errorf("slots %+v", slots)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "url.example.com calls a url") {
		t.Errorf("notes %q", notes)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{Webhooks: []admissionregistrationv1.MutatingWebhook{
		{Name: "m.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "t", Name: "m"}}}}}
	if slots, _ := servedSlots(mwc); len(slots) != 1 || slots[0].webhook != "m.example.com" {
		t.Errorf("mutating slots %+v", slots)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{Spec: apiextensionsv1.CustomResourceDefinitionSpec{Conversion: &apiextensionsv1.CustomResourceConversion{
		Strategy: apiextensionsv1.WebhookConverter, Webhook: &apiextensionsv1.WebhookConversion{ClientConfig: &apiextensionsv1.WebhookClientConfig{
			Service: &apiextensionsv1.ServiceReference{Namespace: "t", Name: "conv", Port: ptr.To(int32(9443))}, CABundle: []byte("C")}}}}}
	if slots, notes := servedSlots(crd); len(slots) != 1 || slots[0].webhook != "" || slots[0].service.Port != 9443 || string(slots[0].caBundle) != "C" || len(notes) != 0 {
		t.Errorf("CRD slots %+v %q", slots, notes)
	}
	if slots, notes := servedSlots(&apiextensionsv1.CustomResourceDefinition{}); len(slots) != 0 || !strings.Contains(strings.Join(notes, ""), "not Webhook") {
		t.Errorf("CRD without conversion: %+v %q", slots, notes)
	}
	apisvc := &apiregistrationv1.APIService{Spec: apiregistrationv1.APIServiceSpec{Service: &apiregistrationv1.ServiceReference{Namespace: "t", Name: "api"}, CABundle: []byte("X")}}
	if slots, _ := servedSlots(apisvc); len(slots) != 1 || slots[0].service.Port != 443 {
		t.Errorf("APIService slots %+v", slots)
	}
	if slots, notes := servedSlots(&apiregistrationv1.APIService{}); len(slots) != 0 || !strings.Contains(strings.Join(notes, ""), "local APIService") {
		t.Errorf("local APIService: %+v %q", slots, notes)
	}
}

// TestInspectEndpoint: an endpoint is classified against the slot's own bundle, names the CA of the bundle
// that verified it or says why none did, describes the chain, and never holds key material.
func TestInspectEndpoint(t *testing.T) {
	active := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	other := newCA(t, t0.Add(-24*time.Hour), 365*24*time.Hour)
	chainOf := func(ca *signer.CA, svc string) []*x509.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ca.Sign(signer.LeafRequest{ServiceName: svc, Namespace: "t", ClusterDomain: "cluster.local", PublicKey: &key.PublicKey, Duration: 168 * time.Hour, Now: t0})
		if err != nil {
			t.Fatal(err)
		}
		return []*x509.Certificate{l.Certificate}
	}
	bundle := []*x509.Certificate{active.Certificate}
	roles := map[string]string{serial(active): "Active"}
	const name = "hook.t.svc"

	ok := InspectEndpoint("10.0.0.1:8443", chainOf(active, "hook"), nil, bundle, name, t0, roles)
	if ok.State != "Verified" || ok.VerifiedBy == nil || ok.VerifiedBy.SerialNumber != serial(active) || ok.VerifiedBy.Role != "Active" {
		t.Errorf("verified endpoint: %+v", ok)
	}
	if len(ok.Chain) != 1 || !strings.Contains(strings.Join(ok.Chain[0].DNSNames, ","), name) || ok.Chain[0].SerialNumber == "" {
		t.Errorf("chain %+v", ok.Chain)
	}
	bad := InspectEndpoint("10.0.0.2:8443", chainOf(other, "hook"), nil, bundle, name, t0, roles)
	if bad.State != "Untrusted" || bad.VerifiedBy != nil || !strings.Contains(bad.Message, serial(active)) {
		t.Errorf("untrusted endpoint: %+v", bad)
	}
	wrong := InspectEndpoint("10.0.0.3:8443", chainOf(active, "other"), nil, bundle, name, t0, roles)
	if wrong.State != "NameMismatch" || wrong.VerifiedBy == nil {
		t.Errorf("name mismatch: %+v", wrong)
	}
	refused := InspectEndpoint("10.0.0.4:8443", nil, syscall.ECONNREFUSED, bundle, name, t0, roles)
	if refused.State != "Unreachable" || len(refused.Chain) != 0 {
		t.Errorf("refused: %+v", refused)
	}
	tunnel := InspectEndpoint("10.0.0.5:8443", nil, &tunnelError{pod: types.NamespacedName{Namespace: "t", Name: "hook-0"}, port: 8443, err: errors.New("pods \"hook-0\" is forbidden")}, bundle, name, t0, roles)
	if tunnel.State != "Unreachable" || !strings.Contains(tunnel.Message, "pods/portforward to pod t/hook-0 port 8443") {
		t.Errorf("tunnel failure: %+v", tunnel)
	}
	data, err := json.Marshal([]EndpointInspection{ok, bad, wrong, refused, tunnel})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("PRIVATE KEY")) || bytes.Contains(data, []byte("BEGIN")) {
		t.Errorf("the report carries PEM: %s", data)
	}
	if got := worstState([]EndpointInspection{ok, wrong, bad, refused}); got != "Untrusted" {
		t.Errorf("worst state %s, want Untrusted", got)
	}
	if got := worstState([]EndpointInspection{{State: stateNotInspected}, ok}); got != "Verified" {
		t.Errorf("worst of NotInspected and Verified: %s", got)
	}
	if got := worstState([]EndpointInspection{{State: stateNotInspected}}); got != stateNotInspected {
		t.Errorf("worst of NotInspected: %s", got)
	}
}

// TestVerifierView: the slot's entry in status.served.worstTargets, what its absence means, and the
// Serving condition of the Service's requests.
func TestVerifierView(t *testing.T) {
	svc := servedcert.ServiceRef{Namespace: "t", Name: "hook", Port: 443}
	served := &certapiv1alpha1.ServedSummary{Targets: 3, Verified: 1, Untrusted: 1, Unreachable: 1, WorstTargets: []string{
		"ValidatingWebhookConfiguration v webhook a.example.com: Untrusted", "ValidatingWebhookConfiguration v webhook b.example.com: Unreachable"}}
	scr := certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "hook"}, Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: "hook"}}
	scr.Status.Conditions = []metav1.Condition{{Type: certapiv1alpha1.ConditionServing, Status: metav1.ConditionFalse, Reason: "Untrusted", Message: "signed by someone else"}}
	other := certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "x"}, Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: "x"}}
	quiet := certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "t", Name: "hook-2"}, Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: "hook"}}

	v := verifierView(kindValidatingWebhookConfiguration, "v", "a.example.com", svc, served, nil, []certapiv1alpha1.ServingCertRequest{scr, other, quiet})
	if v.State != "Untrusted" || len(v.Serving) != 2 || v.Serving[0] != (ServingView{Request: "t/hook", Status: "False", Reason: "Untrusted", Message: "signed by someone else"}) ||
		v.Serving[1] != (ServingView{Request: "t/hook-2"}) {
		t.Errorf("view %+v", v)
	}
	if v := verifierView(kindValidatingWebhookConfiguration, "v", "c.example.com", svc, served, nil, nil); v.State != "" || !strings.Contains(v.Detail, "not among status.served.worstTargets") {
		t.Errorf("unlisted slot: %+v", v)
	}
	if v := verifierView(kindValidatingWebhookConfiguration, "v", "a", svc, nil, nil, nil); !strings.Contains(v.Detail, "no status.served") {
		t.Errorf("no status.served: %+v", v)
	}
	if v := verifierView(kindAPIService, "v1.example.com", "", svc, nil, errors.New("forbidden"), nil); !strings.Contains(v.Detail, "could not be read: forbidden") {
		t.Errorf("unreadable CA: %+v", v)
	}
}

// TestPrintServedInspection: the report for people names each slot, its bundle, each endpoint with its
// state and chain, and certapi's own view.
func TestPrintServedInspection(t *testing.T) {
	r := ServedInspection{Kind: kindValidatingWebhookConfiguration, Name: "v", Time: t0, Mode: modeDirect, OptedIn: true, Slots: []SlotInspection{{
		Webhook: "a.example.com", Service: ServiceReport{Namespace: "t", Name: "hook", Port: 443}, ServerName: "hook.t.svc", State: "Untrusted",
		CABundle: []BundleCA{{Subject: "CN=certapi", SerialNumber: "0a", NotAfter: t0.Add(time.Hour), Role: "Active"}},
		Endpoints: []EndpointInspection{{Address: "10.0.0.1:8443", Pod: "t/hook-0", State: "Untrusted", Message: "signed by \"CN=other\"",
			Chain: []CertificateInfo{{Subject: "CN=hook.t.svc", Issuer: "CN=other", SerialNumber: "0b", DNSNames: []string{"hook.t.svc"}, NotBefore: t0, NotAfter: t0.Add(time.Hour)}}}},
		Verifier: VerifierView{State: "Untrusted", Detail: "status.served.worstTargets lists it as Untrusted",
			Serving: []ServingView{{Request: "t/hook", Status: "False", Reason: "Untrusted", Message: "m"}}},
	}}}
	var out bytes.Buffer
	if err := PrintServedInspection(&out, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"ValidatingWebhookConfiguration v", "directly (--direct)",
		"Webhook a.example.com: Service t/hook port 443 (server name hook.t.svc): Untrusted",
		`CA 0a "CN=certapi", valid until`, "certapi's Active CA",
		"Endpoint 10.0.0.1:8443 (pod t/hook-0): Untrusted", "subject CN=hook.t.svc", "issuer CN=other", "serial 0b", "SANs hook.t.svc",
		"certapi's check: status.served.worstTargets lists it as Untrusted",
		"ServingCertRequest t/hook: Serving=False (Untrusted): m",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
