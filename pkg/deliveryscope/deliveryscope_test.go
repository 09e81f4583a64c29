package deliveryscope

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Scope
		err  string
	}{
		{in: "", want: LabelledNamespaces},
		{in: "labelled-namespaces", want: LabelledNamespaces},
		{in: "cluster", want: Cluster},
		{in: "Cluster", err: `"Cluster" is not a Secret delivery scope; accepted: labelled-namespaces`},
		{in: "labeled-namespaces", err: "accepted: labelled-namespaces"},
		{in: "all", err: "or cluster"},
	} {
		got, err := Parse(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) = %q, %v; want an error saying %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestAllows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scope  Scope
		labels map[string]string
		want   bool
	}{
		{name: "labelled", scope: LabelledNamespaces, labels: map[string]string{"certapi.dev/secret-delivery": "enabled"}, want: true},
		{name: "no label", scope: LabelledNamespaces, labels: map[string]string{"team": "a"}},
		{name: "unknown namespace", scope: LabelledNamespaces},
		{name: "another value", scope: LabelledNamespaces, labels: map[string]string{"certapi.dev/secret-delivery": "true"}},
		{name: "empty value", scope: LabelledNamespaces, labels: map[string]string{"certapi.dev/secret-delivery": ""}},
		{name: "cluster scope, no label", scope: Cluster, want: true},
		{name: "cluster scope, labelled", scope: Cluster, labels: map[string]string{"certapi.dev/secret-delivery": "enabled"}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Policy{Scope: tc.scope}).Allows(tc.labels); got != tc.want {
				t.Errorf("Allows = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		sa   types.NamespacedName
		want []string
	}{
		{name: "the chart's default release", sa: types.NamespacedName{Namespace: "certapi-system", Name: "certapi"},
			want: []string{"kubectl label namespace team-a certapi.dev/secret-delivery=enabled",
				"kubectl create rolebinding certapi-secret-delivery -n team-a --clusterrole=certapi:secret-delivery --serviceaccount=certapi-system:certapi"}},
		{name: "another release name", sa: types.NamespacedName{Namespace: "platform", Name: "prod-certapi"},
			want: []string{"--clusterrole=prod-certapi:secret-delivery --serviceaccount=platform:prod-certapi", "rolebinding prod-certapi-secret-delivery"}},
		{name: "unknown ServiceAccount", want: []string{"--clusterrole=certapi:secret-delivery --serviceaccount=<certapi's namespace>:<certapi's ServiceAccount>"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Policy{ServiceAccount: tc.sa}
			msg := p.NotOptedIn("team-a")
			for _, w := range tc.want {
				if !strings.Contains(msg, w) {
					t.Errorf("NotOptedIn = %q; want it to contain %q", msg, w)
				}
			}
			if !strings.Contains(msg, `namespace "team-a" has not opted in`) || !strings.Contains(msg, "servingcerts subresource") {
				t.Errorf("NotOptedIn = %q; want it to say what is wrong and the alternative", msg)
			}
			f := p.Forbidden("team-a", "secrets is forbidden")
			if !strings.Contains(f, "secrets is forbidden") || !strings.Contains(f, tc.want[len(tc.want)-1]) {
				t.Errorf("Forbidden = %q; want kube-apiserver's answer and %q", f, tc.want[len(tc.want)-1])
			}
		})
	}
}
