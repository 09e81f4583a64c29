// Package monitoring checks artifacts/monitoring with Prometheus's own promtool (built by `make tools`):
// the alerting rules and the dashboard's queries parse and pass `promtool check rules`, the alerts pass
// their unit tests (`promtool test rules`), and every alert is documented and tested both ways.
package monitoring

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/certapi/certapi/test/framework"
)

// ruleGroup is a Prometheus rule group, as in a rules file and a PrometheusRule's spec.groups.
type ruleGroup struct {
	Name  string `json:"name"`
	Rules []rule `json:"rules"`
}

type rule struct {
	Alert       string            `json:"alert,omitempty"`
	Record      string            `json:"record,omitempty"`
	Expr        string            `json:"expr"`
	For         string            `json:"for,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// prometheusRule is the part of the PrometheusRule object the test reads.
type prometheusRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name      string            `json:"name"`
		Namespace string            `json:"namespace"`
		Labels    map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Groups []ruleGroup `json:"groups"`
	} `json:"spec"`
}

// dashboard is the part of the Grafana dashboard the test reads.
type dashboard struct {
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// Monitoring holds the contents of artifacts/monitoring, read once.
type Monitoring struct {
	Dir       string
	Rule      prometheusRule
	Dashboard dashboard
}

// Alerts returns every alerting rule.
func (m Monitoring) Alerts() []rule {
	var out []rule
	for _, g := range m.Rule.Spec.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

// DashboardQueries returns each panel target's query, keyed by a recording rule name for it, with the
// dashboard's variables as Grafana sets them when All is chosen ($cluster, $namespace and $job: .*, which
// also matches a series without the label, as a Prometheus scraping certapi by static_configs has).
func (m Monitoring) DashboardQueries() map[string]string {
	out := map[string]string{}
	all := strings.NewReplacer("$cluster", ".*", "$namespace", ".*", "$job", ".*")
	for _, p := range m.Dashboard.Panels {
		for _, t := range p.Targets {
			out[fmt.Sprintf("certapi_dashboard:panel%d_%s", p.ID, t.RefID)] = all.Replace(t.Expr)
		}
	}
	return out
}

// ReadMonitoring reads artifacts/monitoring.
func ReadMonitoring(t testing.TB) Monitoring {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	m := Monitoring{Dir: filepath.Join(root, "artifacts", "monitoring")}
	data, err := os.ReadFile(filepath.Join(m.Dir, "prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &m.Rule); err != nil {
		t.Fatalf("prometheusrule.yaml: %v", err)
	}
	data, err = os.ReadFile(filepath.Join(m.Dir, "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m.Dashboard); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	return m
}

// WriteRuleFiles writes the alerting rules to dir/rules.yaml and the dashboard's queries, as recording
// rules, to dir/dashboard-rules.yaml.
func (m Monitoring) WriteRuleFiles(t testing.TB, dir string) {
	t.Helper()
	write := func(name string, groups []ruleGroup) {
		data, err := yaml.Marshal(map[string]any{"groups": groups})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("rules.yaml", m.Rule.Spec.Groups)
	dash := ruleGroup{Name: "certapi.dashboard"}
	for name, expr := range m.DashboardQueries() {
		dash.Rules = append(dash.Rules, rule{Record: name, Expr: expr})
	}
	write("dashboard-rules.yaml", []ruleGroup{dash})
}

func promtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	bin, err := framework.PromtoolBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

func TestRulesAndDashboardWithPromtool(t *testing.T) {
	m := ReadMonitoring(t)
	if m.Rule.APIVersion != "monitoring.coreos.com/v1" || m.Rule.Kind != "PrometheusRule" || m.Rule.Metadata.Name == "" {
		t.Fatalf("prometheusrule.yaml is not a PrometheusRule: %s %s %s", m.Rule.APIVersion, m.Rule.Kind, m.Rule.Metadata.Name)
	}
	dir := t.TempDir()
	m.WriteRuleFiles(t, dir)
	tests, err := os.ReadFile(filepath.Join(m.Dir, "prometheusrule_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheusrule_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(promtool(t, dir, "check", "rules", "rules.yaml", "dashboard-rules.yaml"))
	t.Log(promtool(t, dir, "test", "rules", "prometheusrule_test.yaml"))
}

// runbookURL is where the runbook_url annotations point: docs/runbooks.md on the project's main branch,
// one section per alert (kube-prometheus' alerts link theirs the same way).
const runbookURL = "https://github.com/certapi/certapi/blob/main/docs/runbooks.md"

func TestEveryAlertIsDocumentedAndTestedBothWays(t *testing.T) {
	m := ReadMonitoring(t)
	// The runbook is the user documentation's page, one section per alert.
	readme, err := os.ReadFile(filepath.Join(m.Dir, "..", "..", "docs", "runbooks.md"))
	if err != nil {
		t.Fatal(err)
	}
	var unitTests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	data, err := os.ReadFile(filepath.Join(m.Dir, "prometheusrule_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &unitTests); err != nil {
		t.Fatal(err)
	}
	fires, quiet := map[string]bool{}, map[string]bool{}
	for _, tc := range unitTests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				quiet[a.Alertname] = true
			}
		}
	}
	alerts := m.Alerts()
	if len(alerts) < 8 {
		t.Fatalf("%d alerts, want at least the 8 of issue #11", len(alerts))
	}
	for _, a := range alerts {
		anchor := strings.ToLower(a.Alert)
		switch {
		case a.Labels["severity"] != "warning" && a.Labels["severity"] != "critical" && a.Labels["severity"] != "info":
			// info: kube-prometheus' lowest severity, for what is worth knowing but is no failure
			// (CertapiServedCertificateUnreachable).
			t.Errorf("%s: severity %q, want info, warning or critical", a.Alert, a.Labels["severity"])
		case a.Annotations["summary"] == "":
			t.Errorf("%s: no summary", a.Alert)
		case !strings.Contains(a.Annotations["description"], "Runbook: docs/runbooks.md#"+anchor):
			t.Errorf("%s: the description does not name its runbook section", a.Alert)
		case a.Annotations["runbook_url"] != runbookURL+"#"+anchor:
			t.Errorf("%s: runbook_url %q, want %s#%s", a.Alert, a.Annotations["runbook_url"], runbookURL, anchor)
		case !regexp.MustCompile(`(?m)^## ` + a.Alert + `$`).Match(readme):
			t.Errorf("%s: no runbook section in docs/runbooks.md", a.Alert)
		case !fires[a.Alert] || !quiet[a.Alert]:
			t.Errorf("%s: prometheusrule_test.yaml must test it firing (%v) and not firing (%v)", a.Alert, fires[a.Alert], quiet[a.Alert])
		}
	}
	if len(m.DashboardQueries()) < 10 {
		t.Errorf("the dashboard has %d queries", len(m.DashboardQueries()))
	}
}
