package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func TestCell(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"one line", "one line"},
		{"two\nlines,  spaced", "two lines, spaced"},
		{"a|b", `a\|b`},
		{"<svc>.<ns>.svc", "&lt;svc&gt;.&lt;ns&gt;.svc"},
		{"*.web.ns.svc", `\*.web.ns.svc`},
	} {
		if got := cell(tc.in); got != tc.want {
			t.Errorf("cell(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestAnchor(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ServingCertRequest", "servingcertrequest"},
		{"secure serving flags", "secure-serving-flags"},
		{"Condition types and reasons", "condition-types-and-reasons"},
	} {
		if got := anchor(tc.in); got != tc.want {
			t.Errorf("anchor(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

const testTypes = `package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Mode is how a Widget runs.
// +enum
type Mode string

const (
	// ModeFast runs fast.
	ModeFast Mode = "Fast"
)

// Widget is a test kind.
type Widget struct {
	metav1.TypeMeta   ` + "`json:\",inline\"`" + `
	metav1.ObjectMeta ` + "`json:\"metadata,omitempty\"`" + `
	Spec WidgetSpec ` + "`json:\"spec\"`" + `
}

// WidgetSpec is a Widget's spec.
type WidgetSpec struct {
	// name is <a> name.
	// +required
	Name string ` + "`json:\"name\"`" + `
	// mode is how it runs.
	// +optional
	Mode *Mode ` + "`json:\"mode,omitempty\"`" + `
	// sizes are sizes.
	Sizes []int32 ` + "`json:\"sizes,omitempty\"`" + `
	Hidden string ` + "`json:\"-\"`" + `
	// after is a time.
	After *metav1.Time ` + "`json:\"after,omitempty\"`" + `
}

// Reasons of a Widget.
const (
	// ReasonOK: all is well.
	ReasonOK = "OK"
)
`

func TestAPIReference(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "types.go"), []byte(testTypes), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "zz_generated.deepcopy.go"), []byte("package v1\n\ntype Ignored struct{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := apiReference(dir)
	if err != nil {
		t.Fatal(err)
	}
	page := string(out)
	for _, want := range []string{
		"Types: [Widget](#widget), [WidgetSpec](#widgetspec), [Mode](#mode).",
		"| `apiVersion` | string |",
		"| `spec` (required) | [WidgetSpec](#widgetspec) |  |",
		"| `name` (required) | string | name is &lt;a&gt; name. |",
		"| `mode` | [Mode](#mode) | mode is how it runs. |",
		"| `sizes` | []integer | sizes are sizes. |",
		"| `after` | time (RFC 3339) | after is a time. |",
		"| `Fast` | ModeFast runs fast. |",
		"| `OK` | all is well. |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the reference has no %q:\n%s", want, page)
		}
	}
	for _, absent := range []string{"Hidden", "Ignored", "+required", "+enum"} {
		if strings.Contains(page, absent) {
			t.Errorf("the reference shows %q:\n%s", absent, page)
		}
	}
}

func TestFlagReference(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	fs.String("name", "x", "The `NAME` to use | or not.")
	fs.StringSlice("list", nil, "A list.")
	fs.Bool("gone", false, "Hidden.")
	if err := fs.MarkHidden("gone"); err != nil {
		t.Fatal(err)
	}
	page := string(flagReference([]namedFlagSet{{name: "generic", fs: fs}}))
	for _, want := range []string{
		"[generic](#generic-flags)",
		"## generic flags",
		"| `--name NAME` | `x` | The NAME to use \\| or not. |",
		"| `--list strings` |  | A list. |",
		"| `--version` |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the flag reference has no %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "--gone") {
		t.Errorf("a hidden flag is listed:\n%s", page)
	}
}

func TestPluginReference(t *testing.T) {
	root := &cobra.Command{Use: "kubectl-demo", Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl demo"}}
	conn := connectionFlags()
	root.PersistentFlags().AddFlagSet(conn)
	sub := &cobra.Command{Use: "show", Short: "Show things.", RunE: func(*cobra.Command, []string) error { return nil }}
	sub.Flags().Bool("wait", false, "Wait for it.")
	sub.Flags().AddFlagSet(conn) // a command that adds the connection flags as its own, as createscr does
	root.AddCommand(sub)
	page := string(pluginReference([]*cobra.Command{root}))
	for _, want := range []string{
		"### kubectl demo show\n\nShow things.\n",
		"| `--wait` | `false` | Wait for it. |",
		"### Connection flags of the kubectl plugins",
		"| `--cache-dir string` | `$HOME/.kube/cache` |",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the plugin reference has no %q:\n%s", want, page)
		}
	}
	if strings.Count(page, "`--kubeconfig string`") != 1 {
		t.Errorf("the connection flags are not listed exactly once:\n%s", page)
	}
}
