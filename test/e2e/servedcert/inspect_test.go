package servedcert

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/certapi/certapi/pkg/cmd/kubectlcertapi"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// plugin runs `kubectl certapi ARGS...` (the plugin's own command, in this process) against the control
// plane, and returns its output and error.
func plugin(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := kubectlcertapi.NewCmd(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SetArgs(append([]string{"--kubeconfig=" + cp.Kubeconfig}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = cmd.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// inspectJSON runs inspect with -o json and decodes its report.
func inspectJSON(t *testing.T, args ...string) kubectlcertapi.ServedInspection {
	t.Helper()
	out, errOut, err := plugin(t, append(append([]string{"inspect"}, args...), "-o", "json")...)
	if err != nil {
		t.Fatalf("kubectl certapi inspect %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	var r kubectlcertapi.ServedInspection
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("decoding inspect's JSON: %v\n%s", err, out)
	}
	return r
}

// TestInspect: `kubectl certapi inspect` shows, for one webhook configuration, what each endpoint of its
// webhook's Service presents, classified against the caBundle the object holds (the one certapi injected),
// with the CA that verified it or why none did, next to certapi's own view; it agrees with the check.
func TestInspect(t *testing.T) {
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	other := signertest.NewCA(t, time.Now().Add(-time.Hour), 0)

	good := testhelpers.ServeTLS(t, host, testhelpers.CertFromCertapi(t, c, ns, "good"))
	untrusted := testhelpers.ServeTLS(t, host, testhelpers.CertFromCA(t, other, ns, "untrusted"))
	testhelpers.SelectorlessService(t, kube, ns, "good", good.Addr, true)
	testhelpers.SelectorlessService(t, kube, ns, "untrusted", untrusted.Addr, true)
	goodName := testhelpers.InjectedWebhook(t, kube, ns, "good", webhookDomain)
	untrustedName := testhelpers.InjectedWebhook(t, kube, ns, "untrusted", webhookDomain)

	// Once certapi's check has seen both, inspect and the check are compared.
	waitFor(t, kube, untrustedName, "Untrusted", 60*time.Second)
	waitServing(t, ns, "good", metav1.ConditionTrue, "Verified", 60*time.Second)
	active := e2etest.ActiveSerial(t, cp)

	// Verified: the endpoint's chain, the bundle's CA that verified it (certapi's Active CA), and the
	// Serving condition of the Service's request.
	r := inspectJSON(t, "validatingwebhookconfiguration/"+goodName, "--direct")
	if r.Kind != "ValidatingWebhookConfiguration" || r.Name != goodName || r.Mode != "direct" || !r.OptedIn || len(r.Slots) != 1 {
		t.Fatalf("report %+v", r)
	}
	s := r.Slots[0]
	if s.Webhook != "good.served.e2e.certapi.dev" || s.ServerName != "good."+ns+".svc" || s.State != "Verified" || len(s.CABundle) == 0 || len(s.Endpoints) != 1 {
		t.Fatalf("slot %+v", s)
	}
	e := s.Endpoints[0]
	if e.Address != good.Addr || e.State != "Verified" || e.VerifiedBy == nil || e.VerifiedBy.SerialNumber != active || e.VerifiedBy.Role != "Active" {
		t.Errorf("endpoint %+v; want %s Verified by the Active CA %s", e, good.Addr, active)
	}
	if len(e.Chain) != 1 || !strings.Contains(strings.Join(e.Chain[0].DNSNames, " "), "good."+ns+".svc") || e.Chain[0].SerialNumber == "" || e.Chain[0].NotAfter.IsZero() {
		t.Errorf("chain %+v", e.Chain)
	}
	if len(s.Verifier.Serving) != 1 || s.Verifier.Serving[0].Request != ns+"/good" || s.Verifier.Serving[0].Status != "True" || s.Verifier.Serving[0].Reason != "Verified" {
		t.Errorf("certapi's view %+v; want the Serving condition of %s/good", s.Verifier, ns)
	}

	// Untrusted, through the short name: no CA of the bundle verifies it, the report says which CA
	// signed it, and certapi's status.served lists the slot the same way.
	r = inspectJSON(t, "vwc", untrustedName, "--direct")
	if len(r.Slots) != 1 || len(r.Slots[0].Endpoints) != 1 {
		t.Fatalf("report %+v", r)
	}
	s, e = r.Slots[0], r.Slots[0].Endpoints[0]
	if s.State != "Untrusted" || e.State != "Untrusted" || e.VerifiedBy != nil || !strings.Contains(e.Message, other.Certificate.Subject.CommonName) ||
		!strings.Contains(e.Message, active) {
		t.Errorf("endpoint %+v; want Untrusted, naming the CA that signed it and the bundle's", e)
	}
	if len(e.Chain) != 1 || !strings.Contains(e.Chain[0].Issuer, other.Certificate.Subject.CommonName) {
		t.Errorf("chain %+v", e.Chain)
	}
	if s.Verifier.State != "Untrusted" {
		t.Errorf("certapi's view %+v; want status.served to list it Untrusted", s.Verifier)
	}

	// For people: the same, and no key material.
	text, errOut, err := plugin(t, "inspect", "validatingwebhookconfiguration/"+untrustedName, "--direct")
	if err != nil {
		t.Fatalf("inspect: %v\n%s", err, errOut)
	}
	for _, want := range []string{
		"Webhook untrusted.served.e2e.certapi.dev: Service " + ns + "/untrusted port 443 (server name untrusted." + ns + ".svc): Untrusted",
		"Endpoint " + untrusted.Addr + ": Untrusted", "issuer CN=" + other.Certificate.Subject.CommonName,
		"certapi's check: status.served.worstTargets lists it as Untrusted",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("inspect's output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "BEGIN") || strings.Contains(text, "PRIVATE") {
		t.Errorf("inspect prints PEM:\n%s", text)
	}
	t.Logf("kubectl certapi inspect vwc/%s --direct:\n%s", untrustedName, text)

	// Without --direct, an endpoint with no Pod behind it cannot be port-forwarded to: inspect says so.
	r = inspectJSON(t, "validatingwebhookconfigurations.admissionregistration.k8s.io/"+goodName)
	if e := r.Slots[0].Endpoints[0]; r.Mode != "port-forward" || e.State != "NotInspected" || !strings.Contains(e.Message, "--direct") {
		t.Errorf("port-forward mode, endpoint without a Pod: %+v", e)
	}

	// A type inspect does not know: the error lists what it accepts.
	if _, _, err := plugin(t, "inspect", "deployment/"+goodName); err == nil || !strings.Contains(err.Error(), "validatingwebhookconfiguration/NAME") {
		t.Errorf("inspect deployment/...: %v; want an error listing the accepted types", err)
	}
	// An object that does not exist: the API's NotFound.
	if _, _, err := plugin(t, "inspect", "apiservice/v1.nothing.example.com"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("inspect of a missing APIService: %v", err)
	}
}
