package createscr

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// kubeconfig writes a kubeconfig whose current context has namespace ns and whose server nothing
// listens on, so that a test that reached the network would fail.
func kubeconfig(t *testing.T, ns string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t"}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u", Namespace: ns}
	cfg.CurrentContext = "ctx"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// execute runs the command with args and returns its stdout, stderr and error.
func execute(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := NewCmd(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd.SilenceErrors = true
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), errOut.String(), err
}

func TestClientDryRunPrintsTheObject(t *testing.T) {
	kc := kubeconfig(t, "from-kubeconfig")
	for _, tc := range []struct {
		name   string
		args   []string
		wantNS string
	}{{
		name: "namespace from the kubeconfig is not written into the object, as kubectl create does",
		args: []string{"--kubeconfig", kc},
	}, {
		name:   "-n is written into the object",
		args:   []string{"--kubeconfig", kc, "-n", "explicit"},
		wantNS: "explicit",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"web", "--service=web", "--dns-name=a.x.svc,b.x.svc", "--dns-name=c.x.svc",
				"--duration=720h", "--renew-before=240h", "--key-algorithm=rsa2048", "--secret=web-tls", "--service-account=web,web-canary",
				"--dry-run=client", "-o", "yaml"}, tc.args...)
			out, errOut, err := execute(t, args...)
			if err != nil {
				t.Fatalf("%v\nstderr: %s", err, errOut)
			}
			var got certapiv1alpha1.ServingCertRequest
			if err := yaml.UnmarshalStrict([]byte(out), &got); err != nil {
				t.Fatalf("output is not a ServingCertRequest: %v\n%s", err, out)
			}
			if got.APIVersion != "certapi.dev/v1alpha1" || got.Kind != "ServingCertRequest" || got.Name != "web" || got.Namespace != tc.wantNS {
				t.Fatalf("metadata: %+v %+v", got.TypeMeta, got.ObjectMeta)
			}
			s := got.Spec
			if s.ServiceName != "web" || strings.Join(s.DNSNames, " ") != "a.x.svc b.x.svc c.x.svc" ||
				s.Duration.Duration.String() != "720h0m0s" || s.RenewBefore.Duration.String() != "240h0m0s" ||
				s.KeyAlgorithm != certapiv1alpha1.KeyAlgorithmRSA2048 || s.SecretName != "web-tls" ||
				strings.Join(s.ServiceAccountNames, " ") != "web web-canary" {
				t.Fatalf("spec: %+v", s)
			}
		})
	}
}

func TestClientDryRunOutputLine(t *testing.T) {
	out, _, err := execute(t, "web", "--service=web", "--dry-run=client", "--kubeconfig", kubeconfig(t, "ns"))
	if err != nil {
		t.Fatal(err)
	}
	if out != "servingcertrequest.certapi.dev/web created (dry run)\n" {
		t.Fatalf("output %q", out)
	}
}

// TestCompletionIsNotAName checks that a request may be named "completion" (cobra's completion
// subcommand took that name) while `completion SHELL` still prints the plugin's completion script.
func TestCompletionIsNotAName(t *testing.T) {
	out, _, err := execute(t, "completion", "--service=web", "--dry-run=client", "--kubeconfig", kubeconfig(t, "ns"))
	if err != nil {
		t.Fatal(err)
	}
	if out != "servingcertrequest.certapi.dev/completion created (dry run)\n" {
		t.Errorf("a request named completion: output %q", out)
	}
	for shell, want := range map[string]string{
		"bash":       "__start_kubectl-create-servingcertrequest",
		"zsh":        "#compdef kubectl-create-servingcertrequest",
		"fish":       "complete -c kubectl-create-servingcertrequest",
		"powershell": "Register-ArgumentCompleter",
	} {
		out, _, err := execute(t, "completion", shell)
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("completion %s: error %v, output without %q:\n%.300s", shell, err, want, out)
		}
	}
	if _, _, err := execute(t, "completion", "tcsh"); err == nil || !strings.Contains(err.Error(), `unknown shell "tcsh": want bash, zsh, fish or powershell`) {
		t.Errorf("completion tcsh: error %v", err)
	}
}

func TestClientDryRunNeedsNoKubeconfig(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "missing"))
	t.Setenv("HOME", t.TempDir())
	out, _, err := execute(t, "web", "--service=web", "--dry-run=client", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if out != "servingcertrequest.certapi.dev/web\n" {
		t.Fatalf("output %q", out)
	}
}

func TestCommandLineErrors(t *testing.T) {
	kc := kubeconfig(t, "ns")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no name", []string{"--service=web"}, "exactly one NAME is required, got 0\nSee 'kubectl create servingcertrequest -h' for help and examples"},
		{"two names", []string{"a", "b", "--service=web"}, "exactly one NAME is required, got 2"},
		{"no service", []string{"web"}, `required flag(s) "service" not set`},
		{"empty service", []string{"web", "--service="}, "--service is required"},
		{"bad key algorithm", []string{"web", "--service=web", "--key-algorithm=DSA"}, `invalid --key-algorithm "DSA": must be one of ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096`},
		{"bad duration", []string{"web", "--service=web", "--duration=7d"}, `invalid argument "7d" for "--duration" flag`},
		{"unknown flag", []string{"web", "--service=web", "--bogus"}, "unknown flag: --bogus\nSee 'kubectl create servingcertrequest -h'"},
		{"bad dry run", []string{"web", "--service=web", "--dry-run=maybe"}, `Invalid dry-run value (maybe)`},
		{"wait with client dry run", []string{"web", "--service=web", "--dry-run=client", "--wait"}, "--wait cannot be used with --dry-run"},
		{"wait with server dry run", []string{"web", "--service=web", "--dry-run=server", "--wait"}, "--wait cannot be used with --dry-run"},
		{"timeout without wait", []string{"web", "--service=web", "--timeout=5s"}, "--timeout is the limit of --wait; add --wait"},
		{"zero timeout", []string{"web", "--service=web", "--wait", "--timeout=0s"}, "--timeout must be greater than zero"},
		{"bad output", []string{"web", "--service=web", "--dry-run=client", "-o", "table"}, `unable to match a printer suitable for the output format "table"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := execute(t, append(tc.args, "--kubeconfig", kc)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if out != "" {
				t.Fatalf("printed %q before failing", out)
			}
		})
	}
}

func TestHelpNamesEveryFlag(t *testing.T) {
	out, _, err := execute(t, "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"kubectl create servingcertrequest NAME --service=SVC", "Examples:",
		"--service", "--dns-name", "--duration", "--renew-before", "--key-algorithm", "--secret", "--dry-run",
		"--output", "--wait", "--timeout", "--field-manager", "--kubeconfig", "--context", "--namespace",
		"ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096",
	} {
		if !strings.Contains(out, s) {
			t.Errorf("--help lacks %q", s)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

func TestMain(m *testing.M) {
	// The commands must never read the developer's kubeconfig: every test passes --kubeconfig or sets
	// KUBECONFIG itself.
	os.Unsetenv("KUBECONFIG")
	os.Exit(m.Run())
}
