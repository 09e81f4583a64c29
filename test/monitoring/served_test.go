package monitoring

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestServedCertificateAlerts runs the served certificate alerts in a real Prometheus scraping a real
// certapi whose check probes real TLS servers behind webhook configurations: one serving certapi's
// certificate (Verified), one a certificate of another CA (Untrusted), one whose port nothing listens on
// (Unreachable). CertapiServedCertificateRejected fires for the untrusted one only, naming it from the
// series' labels; CertapiServedCertificateUnreachable (info) for the unreachable one only; neither fires
// for the verified one, and CertapiServedCertificateExpiringSoon for none. Their for: durations are
// promtool's to test (prometheusrule_test.yaml); here they are set to 0 so that the expressions and the
// labels they rely on are shown on certapi's real series within seconds.
func TestServedCertificateAlerts(t *testing.T) {
	if _, err := framework.PrometheusBinary(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cp := framework.StartT(t, framework.Options{CertapiArgs: []string{"--served-check-interval=3s", "--served-check-timeout=1s"}})
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := "served-alerts"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	host := testhelpers.HostIP(t)
	other := signertest.NewCA(t, time.Now().Add(-time.Hour), 0)
	good := testhelpers.ServeTLS(t, host, testhelpers.CertFromCertapi(t, c, ns, "good"))
	untrusted := testhelpers.ServeTLS(t, host, testhelpers.CertFromCA(t, other, ns, "untrusted"))
	closed := testhelpers.ClosedAddr(t, host)
	names := map[string]string{}
	for svc, addr := range map[string]string{"good": good.Addr, "untrusted": untrusted.Addr, "closed": closed} {
		testhelpers.SelectorlessService(t, kube, ns, svc, addr, true)
		// Each webhook is <svc>.alerts.certapi.dev: the alerts' labels are asserted on below.
		names[svc] = testhelpers.InjectedWebhook(t, kube, ns, svc, "alerts.certapi.dev")
	}

	m := ReadMonitoring(t)
	for g := range m.Rule.Spec.Groups {
		for r := range m.Rule.Spec.Groups[g].Rules {
			if rule := &m.Rule.Spec.Groups[g].Rules[r]; strings.HasPrefix(rule.Alert, "CertapiServedCertificate") {
				rule.For = "0s"
			}
		}
	}
	dir := t.TempDir()
	m.WriteRuleFiles(t, dir)
	api := startPrometheus(t, cp, dir)

	type alert struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
		State       string            `json:"state"`
	}
	find := func(alerts []alert, name, object string) *alert {
		for i, a := range alerts {
			if a.Labels["alertname"] == name && a.Labels["name"] == object {
				return &alerts[i]
			}
		}
		return nil
	}
	// Wait until Prometheus has every webhook's state, then for the two alerts to fire.
	for svc, state := range map[string]string{"good": "Verified", "untrusted": "Untrusted", "closed": "Unreachable"} {
		q := fmt.Sprintf(`certapi_served_certificate_target{kind="ValidatingWebhookConfiguration", name=%q, webhook=%q, state=%q} == 1`, names[svc], svc+".alerts.certapi.dev", state)
		testhelpers.Eventually(t, 500*time.Millisecond, 90*time.Second, q, func(ctx context.Context) (bool, error) {
			res, err := query(ctx, api, q)
			return err == nil && len(res) == 1, nil
		})
	}
	var alerts struct {
		Alerts []alert `json:"alerts"`
	}
	testhelpers.Eventually(t, 500*time.Millisecond, 60*time.Second, "CertapiServedCertificateRejected and CertapiServedCertificateUnreachable to fire", func(ctx context.Context) (bool, error) {
		if err := get(ctx, api+"/api/v1/alerts", &alerts); err != nil {
			return false, nil
		}
		rejected := find(alerts.Alerts, "CertapiServedCertificateRejected", names["untrusted"])
		unreachable := find(alerts.Alerts, "CertapiServedCertificateUnreachable", names["closed"])
		return rejected != nil && rejected.State == "firing" && unreachable != nil && unreachable.State == "firing", nil
	})
	rejected := find(alerts.Alerts, "CertapiServedCertificateRejected", names["untrusted"])
	if rejected.Labels["kind"] != "ValidatingWebhookConfiguration" || rejected.Labels["webhook"] != "untrusted.alerts.certapi.dev" ||
		rejected.Labels["state"] != "Untrusted" || rejected.Labels["severity"] != "critical" {
		t.Errorf("CertapiServedCertificateRejected labels %v", rejected.Labels)
	}
	if d := rejected.Annotations["description"]; !strings.Contains(d, "ValidatingWebhookConfiguration "+names["untrusted"]+" webhook untrusted.alerts.certapi.dev:") ||
		!strings.Contains(d, "kubectl certapi inspect validatingwebhookconfiguration/"+names["untrusted"]) {
		t.Errorf("CertapiServedCertificateRejected does not name the object from its labels: %s", d)
	}
	unreachable := find(alerts.Alerts, "CertapiServedCertificateUnreachable", names["closed"])
	if unreachable.Labels["severity"] != "info" || !strings.Contains(unreachable.Annotations["description"], "webhook closed.alerts.certapi.dev") ||
		!strings.Contains(unreachable.Annotations["description"], "not a trust failure") {
		t.Errorf("CertapiServedCertificateUnreachable: %v %v", unreachable.Labels, unreachable.Annotations)
	}
	// Nothing else of these alerts, in any state: not for the verified webhook, not Rejected for the
	// unreachable one, not Unreachable for the untrusted one, ExpiringSoon for none.
	for _, a := range alerts.Alerts {
		name := a.Labels["alertname"]
		if !strings.HasPrefix(name, "CertapiServedCertificate") {
			continue
		}
		want := (name == "CertapiServedCertificateRejected" && a.Labels["name"] == names["untrusted"]) ||
			(name == "CertapiServedCertificateUnreachable" && a.Labels["name"] == names["closed"])
		if !want {
			t.Errorf("%s is %s for %v", name, a.State, a.Labels)
		}
	}
	t.Logf("firing: %s: %s", rejected.Labels["alertname"], rejected.Annotations["description"])
	t.Logf("firing: %s: %s", unreachable.Labels["alertname"], unreachable.Annotations["description"])
}
