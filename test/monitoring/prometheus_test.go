package monitoring

import (
	"context"
	"crypto/elliptic"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestPrometheusScrapesCertapi runs a real Prometheus against a running certapi: it scrapes /metrics and
// /metrics/slis as the ServiceMonitor does (HTTPS, certapi's own CA, the bearer token of a ServiceAccount
// bound to the chart's ClusterRole certapi:metrics-reader only), loads the alerting rules and the
// dashboard's queries (as recording rules), and every one of them evaluates without error; each
// dashboard query returns series, every metric the alerts read is present, and a request nobody called
// servingcerts for has a Ready series of 0 before any certificate.
func TestPrometheusScrapesCertapi(t *testing.T) {
	ctx := context.Background()
	cp := framework.StartT(t, framework.Options{CertapiArgs: []string{"--rotation-grace=1s"}})
	c, _ := testhelpers.Clients(t, cp.AdminConfig)

	// Something for every panel: a request issued through the subresource (issuance rate and latency,
	// a certificate's times) and a rotation (its steps).
	scr := &certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: "web"}}
	if _, err := c.CertapiV1alpha1().ServingCertRequests("default").Create(ctx, scr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	issue := func() {
		t.Helper()
		sc := &certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256()))}}
		if _, err := c.CertapiV1alpha1().ServingCertRequests("default").CreateServingCert(ctx, "web", sc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("issuing: %v", err)
		}
	}
	issue()
	// A request nobody calls servingcerts for: its Ready series exists all the same.
	idle := &certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Name: "idle", Namespace: "default"},
		Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: "idle"}}
	if _, err := c.CertapiV1alpha1().ServingCertRequests("default").Create(ctx, idle, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var before string
	testhelpers.Eventually(t, 500*time.Millisecond, time.Minute, "CertificateAuthority/default to name the Active CA", func(context.Context) (bool, error) {
		before = activeSerial(t, c)
		return before != "", nil
	})
	patch := []byte(`{"spec":{"forceRotation":"prometheus-test"}}`)
	if _, err := c.CertapiV1alpha1().CertificateAuthorities().Patch(ctx, "default", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testhelpers.Eventually(t, 500*time.Millisecond, time.Minute, "the forced rotation to switch", func(context.Context) (bool, error) {
		return activeSerial(t, c) != before, nil
	})

	// Prometheus, configured as servicemonitor.yaml configures the Prometheus Operator.
	m := ReadMonitoring(t)
	dir := t.TempDir()
	m.WriteRuleFiles(t, dir)
	api := startPrometheus(t, cp, dir)

	// Another issuance between scrapes, so that rates have something to show. (kubernetes_healthcheck is
	// there since the framework asked certapi's /readyz at start.)
	issue()

	// Every rule (alerts and the dashboard's queries) evaluates without error, and each dashboard query
	// returns series.
	queries := m.DashboardQueries()
	testhelpers.Eventually(t, 500*time.Millisecond, 90*time.Second, "every rule to evaluate cleanly and every dashboard query to return series", func(ctx context.Context) (bool, error) {
		var rules struct {
			Groups []struct {
				Rules []struct {
					Name           string `json:"name"`
					Health         string `json:"health"`
					LastError      string `json:"lastError"`
					LastEvaluation string `json:"lastEvaluation"`
				} `json:"rules"`
			} `json:"groups"`
		}
		if err := get(ctx, api+"/api/v1/rules", &rules); err != nil {
			return false, nil
		}
		n := 0
		for _, g := range rules.Groups {
			for _, r := range g.Rules {
				n++
				if r.LastError != "" || (r.Health != "ok" && r.Health != "unknown") {
					return false, fmt.Errorf("rule %s: health %s: %s", r.Name, r.Health, r.LastError)
				}
				if r.Health != "ok" {
					return false, nil // not evaluated yet
				}
			}
		}
		if want := len(m.Alerts()) + len(queries); n != want {
			return false, fmt.Errorf("Prometheus loaded %d rules, want %d", n, want)
		}
		for name := range queries {
			if res, err := query(ctx, api, name); err != nil || len(res) == 0 {
				t.Logf("%s (%s): no series yet (%v)", name, queries[name], err)
				return false, nil
			}
		}
		return true, nil
	})

	// Every metric an alert reads is scraped, except those absent by design on a healthy certapi (their
	// alerts' rule tests, artifacts/monitoring/prometheusrule_test.yaml, give them series).
	absentWhenHealthy := map[string]string{
		"certapi_ca_request_pending_since_timestamp_seconds": "has a series only while a CA certificate request waits for an organisation's CA (--ca-upstream=Manual)",
		"certapi_ca_key_operations_total":                    "has series only once certapi used a key plugin (--ca-key-plugin: CA keys in an HSM)",
	}
	metric := regexp.MustCompile(`\b(certapi_[a-z_]+|kubernetes_healthcheck)\b`)
	seen := map[string]bool{}
	for _, a := range m.Alerts() {
		for _, name := range metric.FindAllString(a.Expr, -1) {
			if seen[name] {
				continue
			}
			seen[name] = true
			if why, ok := absentWhenHealthy[name]; ok {
				t.Logf("alert %s reads %s, which %s", a.Alert, name, why)
				continue
			}
			res, err := query(context.Background(), api, "count("+name+")")
			if err != nil || len(res) == 0 {
				t.Errorf("alert %s reads %s, which Prometheus has no series of (%v)", a.Alert, name, err)
			}
		}
	}
	t.Logf("metrics the alerts read, all present: %v", slices.Sorted(func(yield func(string) bool) {
		for k := range seen {
			if !yield(k) {
				return
			}
		}
	}))

	// The labels the Prometheus Operator's configuration gives the series: the target's on certapi's own
	// (certapi's namespace, its Service, the port's name as endpoint, job, and metrics_path, which keeps
	// the two endpoints' up apart); on the request series the request's namespace, honored
	// (honorLabels), and nothing renamed exported_*.
	ns, svc := framework.CertapiNamespace, framework.CertapiServiceName
	target := fmt.Sprintf(`namespace=%q, service=%q, endpoint="https", job=%q`, ns, svc, svc)
	for _, q := range []string{
		`certapi_leader{` + target + `, metrics_path="/metrics"}`,
		`kubernetes_healthcheck{` + target + `, metrics_path="/metrics/slis", type="readyz", name="certapi-serving-certificate"}`,
		`up{` + target + `, metrics_path="/metrics"} == 1`,
		`up{` + target + `, metrics_path="/metrics/slis"} == 1`,
		fmt.Sprintf(`certapi_servingcertrequest_ready{namespace="default", name="idle", service=%q, job=%q}`, svc, svc),
	} {
		testhelpers.Eventually(t, 500*time.Millisecond, 30*time.Second, "one series of "+q, func(ctx context.Context) (bool, error) {
			res, err := query(ctx, api, q)
			return err == nil && len(res) == 1, nil
		})
	}
	for _, l := range []string{"exported_namespace", "exported_name", "exported_endpoint", "exported_job", "exported_instance", "exported_service", "exported_pod"} {
		if res, err := query(ctx, api, fmt.Sprintf(`count by (__name__) ({%s!=""})`, l)); err != nil || len(res) != 0 {
			t.Errorf("series with a label %s (a label of certapi's renamed by the target's): %s (%v)", l, res, err)
		}
	}
	var byName []struct {
		Metric map[string]string `json:"metric"`
	}
	// (ALERTS and ALERTS_FOR_STATE, Prometheus's own series of the alerts, carry the alerts' labels.)
	res, err := query(ctx, api, fmt.Sprintf(`count by (__name__) ({job=%q, namespace!=%q, __name__!~"ALERTS|ALERTS_FOR_STATE"})`, svc, ns))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		byName = append(byName, struct {
			Metric map[string]string `json:"metric"`
		}{})
		if err := json.Unmarshal(r, &byName[len(byName)-1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range byName {
		if name := r.Metric["__name__"]; !requestNamespaced.MatchString(name) {
			t.Errorf("%s has series whose namespace is not certapi's: only the request series' namespace may differ (the dashboard selects the others by certapi's)", name)
		}
	}
	if len(byName) == 0 {
		t.Errorf("no series carries a request's namespace: is honorLabels off?")
	}

	// The Ready series: 1 for the request that got a certificate, 0 with no reason for the one nobody called.
	for q, want := range map[string]string{
		`certapi_servingcertrequest_ready{namespace="default", name="web", reason="Issued"} == 1`: "web Ready (Issued)",
		`certapi_servingcertrequest_ready{namespace="default", name="idle", reason=""} == 0`:      "idle not Ready, no reason",
	} {
		testhelpers.Eventually(t, 500*time.Millisecond, 30*time.Second, want, func(ctx context.Context) (bool, error) {
			res, err := query(ctx, api, q)
			return err == nil && len(res) == 1, nil
		})
	}

	// Nothing fires on a healthy certapi but CertapiServingCertRequestNotReady for the request nobody
	// called, pending for its 15 minutes: the alert sees a request before its first certificate.
	type alert struct {
		Labels map[string]string `json:"labels"`
		State  string            `json:"state"`
	}
	var alerts struct {
		Alerts []alert `json:"alerts"`
	}
	testhelpers.Eventually(t, 500*time.Millisecond, 30*time.Second, "CertapiServingCertRequestNotReady to be pending for default/idle", func(ctx context.Context) (bool, error) {
		if err := get(ctx, api+"/api/v1/alerts", &alerts); err != nil {
			return false, nil
		}
		return slices.ContainsFunc(alerts.Alerts, func(a alert) bool {
			return a.Labels["alertname"] == "CertapiServingCertRequestNotReady" && a.Labels["name"] == "idle"
		}), nil
	})
	for _, a := range alerts.Alerts {
		idle := a.Labels["alertname"] == "CertapiServingCertRequestNotReady" && a.Labels["namespace"] == "default" && a.Labels["name"] == "idle"
		if !idle || a.State != "pending" || a.Labels["reason"] != "" {
			t.Errorf("alert %s is %s on a healthy certapi: %v", a.Labels["alertname"], a.State, a.Labels)
		}
	}
}

// startPrometheus runs a real Prometheus against cp's certapi with the configuration the Prometheus
// Operator generates from the chart's ServiceMonitor (operatorPrometheusConfig: Kubernetes service
// discovery, HTTPS to /metrics and /metrics/slis, certapi's own CA from the ConfigMap certapi injects, the
// token of a ServiceAccount bound to certapi:metrics-reader only, the operator's relabelling), with the
// rule files in dir (Monitoring.WriteRuleFiles), scraping and evaluating every second. It returns the address of its API
// once both targets are up, and stops it when the test ends.
func startPrometheus(t *testing.T, cp *framework.ControlPlane, dir string) string {
	t.Helper()
	prometheus, err := framework.PrometheusBinary()
	if err != nil {
		t.Fatal(err)
	}
	config := operatorPrometheusConfig(t, cp, dir)
	config["rule_files"] = []string{filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "dashboard-rules.yaml")}
	data, err := yaml.Marshal(config)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	ports, err := framework.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	api := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	proc, err := framework.StartProcess("prometheus", filepath.Join(dir, "prometheus.log"), prometheus, []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(ports[0]),
		"--log.level=warn",
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := proc.Stop(10 * time.Second); err != nil {
			t.Logf("stopping prometheus: %v", err)
		}
		if t.Failed() {
			if log, err := os.ReadFile(filepath.Join(dir, "prometheus.log")); err == nil {
				t.Logf("prometheus log:\n%s", log)
			}
		}
	})

	// Both targets up.
	testhelpers.Eventually(t, 500*time.Millisecond, time.Minute, "Prometheus to scrape both certapi endpoints", func(ctx context.Context) (bool, error) {
		var targets struct {
			ActiveTargets []struct {
				ScrapePool string `json:"scrapePool"`
				Health     string `json:"health"`
				LastError  string `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := get(ctx, api+"/api/v1/targets", &targets); err != nil {
			return false, nil
		}
		up := 0
		for _, tg := range targets.ActiveTargets {
			if tg.Health == "up" {
				up++
			} else if tg.LastError != "" {
				t.Logf("%s: %s", tg.ScrapePool, tg.LastError)
			}
		}
		return up == 2, nil
	})
	return api
}

// scraperToken returns a token of a new ServiceAccount bound to the ClusterRole certapi:metrics-reader as
// the chart renders it (artifacts/deploy/base/rbac.yaml), and to nothing else: what the ServiceMonitor's
// token Secret holds.
func scraperToken(t *testing.T, cp *framework.ControlPlane) string {
	t.Helper()
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "artifacts", "deploy", "base", "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.ClusterRole
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var r rbacv1.ClusterRole
		if err := yaml.Unmarshal([]byte(doc), &r); err == nil && r.Kind == "ClusterRole" && r.Name == "certapi:metrics-reader" {
			role = &r
		}
	}
	if role == nil {
		t.Fatal("artifacts/deploy/base/rbac.yaml has no ClusterRole certapi:metrics-reader")
	}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "certapi-metrics", Namespace: "default"}}
	if _, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "certapi:metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tok.Status.Token
}

// get decodes the data of a Prometheus API response into v.
func get(ctx context.Context, u string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %w", u, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", u, body.Error)
	}
	return json.Unmarshal(body.Data, v)
}

// query runs an instant query and returns its vector.
func query(ctx context.Context, api, q string) ([]json.RawMessage, error) {
	var data struct {
		ResultType string            `json:"resultType"`
		Result     []json.RawMessage `json:"result"`
	}
	if err := get(ctx, api+"/api/v1/query?query="+url.QueryEscape(q), &data); err != nil {
		return nil, err
	}
	return data.Result, nil
}

func activeSerial(t *testing.T, c versioned.Interface) string {
	t.Helper()
	ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil || ca.Status.Active == nil {
		return ""
	}
	return ca.Status.Active.SerialNumber
}
