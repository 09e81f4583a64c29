package servedcert

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cmd/kubectlcertapi"
	"github.com/certapi/certapi/pkg/controller/servedcert"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// latest returns the reason and note of the newest Event the check recorded about the
// ValidatingWebhookConfiguration name ("" when none).
func latest(ctx context.Context, kube kubernetes.Interface, name string) (reason, note string, err error) {
	list, err := kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", err
	}
	var at time.Time
	for _, ev := range list.Items {
		if ev.ReportingController != servedcert.ReportingController || ev.Regarding.Name != name || ev.Regarding.Kind != "ValidatingWebhookConfiguration" {
			continue
		}
		if strings.Contains(ev.Note, "PRIVATE KEY") || strings.Contains(ev.Note, "CERTIFICATE") {
			return "", "", fmt.Errorf("the Event carries PEM: %q", ev.Note)
		}
		if t := ev.EventTime.Time; reason == "" || t.After(at) {
			reason, note, at = ev.Reason, ev.Note, t
		}
	}
	return reason, note, nil
}

// waitServing waits until ServingCertRequest name of ns has the Serving condition status and reason
// (status "" waits for it to have none), and returns its message.
func waitServing(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string, timeout time.Duration) string {
	t.Helper()
	c, _ := testhelpers.Clients(t, cp.AdminConfig)
	var msg string
	e2etest.Eventually(t, timeout, fmt.Sprintf("ServingCertRequest %s/%s Serving=%s %s", ns, name, status, reason), func(ctx context.Context) (bool, error) {
		scr, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cond := meta.FindStatusCondition(scr.Status.Conditions, certapiv1alpha1.ConditionServing)
		if cond == nil {
			return status == "", nil
		}
		msg = cond.Message
		return cond.Status == status && cond.Reason == reason, nil
	})
	return msg
}

// waitFor waits until the newest Event about the configuration name says state, and returns its note.
func waitFor(t *testing.T, kube kubernetes.Interface, name, state string, timeout time.Duration) string {
	t.Helper()
	var reason, note string
	e2etest.Eventually(t, timeout, "ValidatingWebhookConfiguration "+name+" reported "+state, func(ctx context.Context) (bool, error) {
		var err error
		reason, note, err = latest(ctx, kube, name)
		return reason == state, err
	})
	return note
}

// TestServedCertificates: certapi checks, per webhook, what the Service's ready endpoints serve against
// the bundle it injected, and says so in an Event on the webhook configuration and in the metric.
func TestServedCertificates(t *testing.T) {
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	other := signertest.NewCA(t, time.Now().Add(-time.Hour), 0)

	good := testhelpers.ServeTLS(t, host, testhelpers.CertFromCertapi(t, c, ns, "good"))
	untrusted := testhelpers.ServeTLS(t, host, testhelpers.CertFromCA(t, other, ns, "untrusted"))
	wrongName := testhelpers.ServeTLS(t, host, testhelpers.CertFromCertapi(t, c, ns, "elsewhere")) // certapi's certificate, for another Service
	switching := testhelpers.ServeTLS(t, host, testhelpers.CertFromCertapi(t, c, ns, "switching"))
	notReady := testhelpers.ServeTLS(t, host, testhelpers.CertFromCertapi(t, c, ns, "notready"))

	testhelpers.SelectorlessService(t, kube, ns, "good", good.Addr, true)
	testhelpers.SelectorlessService(t, kube, ns, "untrusted", untrusted.Addr, true)
	testhelpers.SelectorlessService(t, kube, ns, "wrongname", wrongName.Addr, true)
	testhelpers.SelectorlessService(t, kube, ns, "switching", switching.Addr, true)
	testhelpers.SelectorlessService(t, kube, ns, "notready", notReady.Addr, false)
	testhelpers.SelectorlessService(t, kube, ns, "closed", testhelpers.ClosedAddr(t, host), true)

	cases := []struct{ svc, state, inNote string }{
		{"good", "Verified", "signed by the CA"},
		{"untrusted", "Untrusted", `signed by "CN=` + other.Certificate.Subject.CommonName + `"`},
		{"wrongname", "NameMismatch", "not for wrongname." + ns + ".svc"},
		{"notready", "NoEndpoints", "no ready endpoint for port 443 (https)"},
		{"closed", "Unreachable", "connection refused"},
		{"switching", "Verified", "signed by the CA"},
	}
	names := map[string]string{}
	for _, c := range cases {
		names[c.svc] = testhelpers.InjectedWebhook(t, kube, ns, c.svc, webhookDomain)
	}
	// A webhook found failing gets a Warning Event saying what its endpoint serves; a healthy one gets
	// none (it shows in the metric, status and the Serving condition below).
	for _, c := range cases {
		if c.state == "Verified" {
			continue
		}
		note := waitFor(t, kube, names[c.svc], c.state, 60*time.Second)
		if !strings.Contains(note, c.inNote) {
			t.Errorf("%s: the Event says %q; want it to say %q", c.svc, note, c.inNote)
		}
		t.Logf("%s: %s: %s", c.svc, c.state, note)
	}

	// The metric counts endpoints by state (certapi's own APIService adds a Verified one), and a series per
	// webhook says its state.
	client, err := cp.CertapiHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 30*time.Second, "certapi_served_certificates by state and certapi_served_certificate_target by webhook", func(ctx context.Context) (bool, error) {
		resp, err := client.Get(cp.CertapiURL + "/metrics")
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		// And one series per webhook, with its state.
		for _, c := range cases {
			line := fmt.Sprintf(`certapi_served_certificate_target{kind="ValidatingWebhookConfiguration",name=%q,state=%q,webhook="%s.served.e2e.certapi.dev"} 1`, names[c.svc], c.state, c.svc)
			if !strings.Contains(string(body), line+"\n") {
				return false, nil
			}
		}
		for state, least := range map[string]int{"Verified": 2, "Untrusted": 1, "NameMismatch": 1, "NoEndpoints": 1, "Unreachable": 1} {
			m := regexp.MustCompile(`(?m)^certapi_served_certificates\{state="` + state + `"\} (\d+)$`).FindSubmatch(body)
			if m == nil {
				return false, nil
			}
			if n, _ := strconv.Atoi(string(m[1])); n < least {
				return false, nil
			}
		}
		return true, nil
	})

	// CertificateAuthority/default counts the webhooks by state and names the worst.
	wantWorst := []string{
		"ValidatingWebhookConfiguration " + names["untrusted"] + " webhook untrusted.served.e2e.certapi.dev: Untrusted",
		"ValidatingWebhookConfiguration " + names["wrongname"] + " webhook wrongname.served.e2e.certapi.dev: NameMismatch",
		"ValidatingWebhookConfiguration " + names["closed"] + " webhook closed.served.e2e.certapi.dev: Unreachable",
		"ValidatingWebhookConfiguration " + names["notready"] + " webhook notready.served.e2e.certapi.dev: NoEndpoints",
	}
	var served *certapiv1alpha1.ServedSummary
	e2etest.Eventually(t, 30*time.Second, "CertificateAuthority/default status.served", func(ctx context.Context) (bool, error) {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		served = ca.Status.Served
		if served == nil || served.Verified < 2 || served.Untrusted < 1 || served.NameMismatch < 1 || served.Unreachable < 1 || served.NoEndpoints < 1 {
			return false, nil
		}
		for _, w := range wantWorst {
			if !slices.Contains(served.WorstTargets, w) {
				return false, nil
			}
		}
		return true, nil
	})
	t.Logf("status.served: %+v", *served)

	// kubectl certapi check lists them, as a warning: they are their owners' to fix, not certapi's.
	ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(context.Background(), certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := kubectlcertapi.PrintChecks(&table, kubectlcertapi.Check(kubectlcertapi.CheckInput{CA: ca, APIService: &apiregistrationv1.APIService{}, Now: time.Now()})); err != nil {
		t.Fatal(err)
	}
	if line := regexp.MustCompile(`(?m)^served certificates\s+WARNING\s+.*$`).FindString(table.String()); !strings.Contains(line, wantWorst[0]) {
		t.Errorf("check does not list %q as a warning:\n%s", wantWorst[0], table.String())
	}

	// The ServingCertRequest of a Service that injected webhooks call says whether its pods serve its
	// certificate; one whose Service no webhook calls has no Serving condition.
	if msg := waitServing(t, ns, "good", metav1.ConditionTrue, "Verified", 30*time.Second); !strings.Contains(msg, "signed by the CA") {
		t.Errorf("the Serving condition of good says %q; want it to name the CA that signed what is served", msg)
	}
	for _, svc := range []string{"good", "switching"} {
		if reason, note, err := latest(context.Background(), kube, names[svc]); err != nil || reason != "" {
			t.Errorf("%s is Verified from the start, and yet has an Event %s %q (%v)", svc, reason, note, err)
		}
	}
	waitServing(t, ns, "switching", metav1.ConditionTrue, "Verified", 30*time.Second)
	waitServing(t, ns, "notready", metav1.ConditionFalse, "NoEndpoints", 30*time.Second)
	waitServing(t, ns, "elsewhere", "", "", 5*time.Second)

	// A server that switches to a certificate of another CA, with no API event at all: the periodic
	// re-probe finds it within an interval or so.
	switching.Store(testhelpers.CertFromCA(t, other, ns, "switching"))
	switched := time.Now()
	waitFor(t, kube, names["switching"], "Untrusted", 4*interval+10*time.Second)
	msg := waitServing(t, ns, "switching", metav1.ConditionFalse, "Untrusted", 30*time.Second)
	if !strings.Contains(msg, other.Certificate.Subject.CommonName) {
		t.Errorf("the Serving condition says %q; want it to name the CA that signed what is served, %s", msg, other.Certificate.Subject.CommonName)
	}
	t.Logf("the switch to a foreign certificate was seen after %s (interval %s)", time.Since(switched).Round(time.Millisecond), interval)
}
