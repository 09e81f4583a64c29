package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestValuesRows(t *testing.T) {
	for _, tc := range []struct {
		name    string
		values  string
		want    []valueRow
		wantErr string
	}{{
		name: "leaves, groups and objects",
		values: `# The chart's header, apart.

# How many replicas.
replicas: 1
image:
  # The image.
  repository: example/certapi
  # Always, IfNotPresent or Never.
  pullPolicy: IfNotPresent
# The pods' security context.
podSecurityContext:
  runAsNonRoot: true
  seccompProfile: {type: RuntimeDefault}
# Leader election.
leader:
  sessionTTL: ""
  # Handoff.
  handoffTimeout: 3s
extraArgs: [] # More flags.
`,
		want: []valueRow{
			{path: "replicas", def: "1", doc: "How many replicas."},
			{path: "image.repository", def: `"example/certapi"`, doc: "The image."},
			{path: "image.pullPolicy", def: `"IfNotPresent"`, doc: "Always, IfNotPresent or Never."},
			{path: "podSecurityContext", def: `{"runAsNonRoot":true,"seccompProfile":{"type":"RuntimeDefault"}}`, doc: "The pods' security context."},
			{path: "leader", doc: "Leader election."},
			{path: "leader.sessionTTL", def: `""`},
			{path: "leader.handoffTimeout", def: `"3s"`, doc: "Handoff."},
			{path: "extraArgs", def: "[]", doc: "More flags."},
		},
	}, {
		name:    "a value nobody explains",
		values:  "# Documented.\na: 1\nb: 2\ngroup:\n  # Documented.\n  c: 3\n  d: 4\n",
		wantErr: "no comment explains b, group.d",
	}, {
		name:    "not a mapping",
		values:  "- a\n",
		wantErr: "want a mapping at the top",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := valuesRows([]byte(tc.values))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("valuesRows: %v; want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("valuesRows =\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

func TestChartReadme(t *testing.T) {
	values := []byte("# The port, | piped.\nport: 8443\n")
	readme := []byte("# Chart\n\nBefore.\n\n" + valuesTableBegin + "\nstale\n" + valuesTableEnd + "\n\nAfter.\n")
	got, err := chartReadme(readme, values)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Chart\n\nBefore.\n\n" + valuesTableBegin + "\n\n| value | default | description |\n|---|---|---|\n| `port` | `8443` | The port, \\| piped. |\n\n" + valuesTableEnd + "\n\nAfter.\n"
	if string(got) != want {
		t.Errorf("chartReadme =\n%s\nwant\n%s", got, want)
	}
	again, err := chartReadme(got, values)
	if err != nil || string(again) != want {
		t.Errorf("chartReadme of its own output changed it: %v\n%s", err, again)
	}
	if _, err := chartReadme([]byte("# Chart\n"), values); err == nil || !strings.Contains(err.Error(), "around the values table") {
		t.Errorf("chartReadme without markers: %v; want an error naming the markers", err)
	}
}
