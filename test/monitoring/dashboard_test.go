package monitoring

import (
	"regexp"
	"strings"
	"testing"
)

// metricSelector finds each metric a dashboard query reads, with its label matchers when it has any.
var metricSelector = regexp.MustCompile(`\b(certapi_[a-z0-9_]+|workqueue_[a-z_]+)\b(\{[^}]*\})?`)

// TestDashboardVariables checks that the dashboard has the variables kube-prometheus users expect
// (datasource, cluster, namespace, job) and that every metric of every query is scoped by the last three,
// so that a Prometheus holding several clusters or several certapi installs shows one at a time.
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
	n := 0
	for _, p := range m.Dashboard.Panels {
		for _, target := range p.Targets {
			sels := metricSelector.FindAllStringSubmatch(target.Expr, -1)
			if len(sels) == 0 {
				t.Errorf("panel %q: query %q reads no certapi metric", p.Title, target.Expr)
			}
			for _, s := range sels {
				n++
				for _, want := range scope {
					if !strings.Contains(s[2], want) {
						t.Errorf("panel %q: %s in %q is not scoped by %s", p.Title, s[1], target.Expr, want)
					}
				}
			}
		}
	}
	if n < 10 {
		t.Errorf("the dashboard's queries read %d metrics", n)
	}
}
