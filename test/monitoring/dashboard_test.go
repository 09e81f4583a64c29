package monitoring

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// metricSelector finds each metric a dashboard query reads, with its label matchers when it has any.
var metricSelector = regexp.MustCompile(`\b(certapi_[a-z0-9_]+|workqueue_[a-z_]+)\b(\{[^}]*\})?`)

// requestNamespaced are the metrics whose namespace label is a ServingCertRequest's, not certapi's: the
// ServiceMonitor honors their labels (honorLabels), so the dashboard's namespace (certapi's) cannot
// select them. Their queries keep the leader of certapi's namespace by a join on instance instead.
var requestNamespaced = regexp.MustCompile(`^certapi_(certificate|servingcertrequest)_`)

// leaderJoin is how a query on request-namespaced metrics keeps the series of the leader that runs in
// the dashboard's cluster, namespace and job.
const leaderJoin = `and on (instance) (certapi_leader{cluster=~"$cluster", namespace=~"$namespace", job=~"$job"} == 1)`

// TestDashboardVariables checks that the dashboard has the variables kube-prometheus users expect
// (datasource, cluster, namespace, job) and that every metric of every query is scoped by the last three,
// so that a Prometheus holding several clusters or several certapi installs shows one at a time: by its
// own labels, or, for the series that carry a request's namespace, by cluster and job and a join on the
// leader of the chosen namespace.
func TestDashboardVariables(t *testing.T) {
	m := ReadMonitoring(t)
	vars := map[string]string{}
	for _, v := range m.Dashboard.Templating.List {
		vars[v.Name] = v.Type
	}
	for name, typ := range map[string]string{"datasource": "datasource", "cluster": "query", "namespace": "query", "job": "query"} {
		if vars[name] != typ {
			t.Errorf("the dashboard's variable %s is %q, want a %s variable", name, vars[name], typ)
		}
	}
	scope := []string{`cluster=~"$cluster"`, `namespace=~"$namespace"`, `job=~"$job"`}
	n, joined := 0, 0
	for _, p := range m.Dashboard.Panels {
		for _, target := range p.Targets {
			sels := metricSelector.FindAllStringSubmatch(target.Expr, -1)
			if len(sels) == 0 {
				t.Errorf("panel %q: query %q reads no certapi metric", p.Title, target.Expr)
			}
			for _, s := range sels {
				n++
				if requestNamespaced.MatchString(s[1]) {
					joined++
					if strings.Contains(s[2], "namespace") {
						t.Errorf("panel %q: %s in %q is selected by namespace, which on it is a request's, not certapi's", p.Title, s[1], target.Expr)
					}
					if !strings.Contains(s[2], scope[0]) || !strings.Contains(s[2], scope[2]) || !strings.Contains(target.Expr, leaderJoin) {
						t.Errorf("panel %q: %s in %q is not scoped by %s, %s and %s", p.Title, s[1], target.Expr, scope[0], scope[2], leaderJoin)
					}
					continue
				}
				for _, want := range scope {
					if !strings.Contains(s[2], want) {
						t.Errorf("panel %q: %s in %q is not scoped by %s", p.Title, s[1], target.Expr, want)
					}
				}
			}
		}
	}
	if n < 10 || joined == 0 {
		t.Errorf("the dashboard's queries read %d metrics, %d of them request-namespaced", n, joined)
	}
}

// TestDashboardConfigMap checks the dashboard's one source: the chart's files/dashboard.json is what the
// Grafana sidecar's ConfigMap (artifacts/monitoring/grafana-dashboard.yaml, rendered from the chart)
// holds and what artifacts/monitoring/dashboard.json is a copy of, and the ConfigMap carries the label
// kube-prometheus-stack's sidecar looks for.
func TestDashboardConfigMap(t *testing.T) {
	m := ReadMonitoring(t)
	source, err := os.ReadFile(filepath.Join(m.Dir, "..", "charts", "certapi", "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile(filepath.Join(m.Dir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(source, copied) {
		t.Errorf("artifacts/monitoring/dashboard.json differs from the chart's files/dashboard.json: edit the chart's, then run hack/update-manifests.sh")
	}
	data, err := os.ReadFile(filepath.Join(m.Dir, "grafana-dashboard.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(data, &cm); err != nil {
		t.Fatalf("grafana-dashboard.yaml: %v", err)
	}
	if cm.Kind != "ConfigMap" || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("grafana-dashboard.yaml: a %s labelled %v, want a ConfigMap labelled grafana_dashboard: \"1\"", cm.Kind, cm.Labels)
	}
	if got := cm.Data["certapi.json"]; got != strings.TrimSuffix(string(source), "\n") {
		t.Errorf("grafana-dashboard.yaml's certapi.json is not the chart's files/dashboard.json:\n%.300s", got)
	}
}
