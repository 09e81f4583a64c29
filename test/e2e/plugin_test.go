package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// pluginName is the executable kubectl looks up on PATH for `kubectl create servingcertrequest`.
const pluginName = "kubectl-create-servingcertrequest"

// buildPlugin builds the plugin into a temporary directory and returns that directory.
func buildPlugin(t *testing.T) string {
	t.Helper()
	return buildPluginNamed(t, pluginName)
}

// buildPluginNamed builds ./cmd/<name> into a temporary directory and returns that directory.
func buildPluginNamed(t *testing.T, name string) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, out)
	}
	return dir
}

// pluginRun is the outcome of one kubectl invocation.
type pluginRun struct {
	stdout, stderr string
	code           int
}

// pluginRunner runs the real kubectl with the plugin's directory first on PATH and KUBECONFIG naming
// the shared control plane's admin kubeconfig.
type pluginRunner struct {
	t   *testing.T
	env []string
}

func newPluginRunner(t *testing.T, dir string) *pluginRunner {
	return newPluginRunnerFor(t, dir, cp.Kubeconfig)
}

// newPluginRunnerFor is newPluginRunner for the control plane whose admin kubeconfig is kubeconfig.
func newPluginRunnerFor(t *testing.T, dir, kubeconfig string) *pluginRunner {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "KUBERC=") {
			env = append(env, kv)
		}
	}
	env = append(env,
		"PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+kubeconfig,
		"KUBERC=off", // a developer's kubectl preferences must not change what the test sees
	)
	return &pluginRunner{t: t, env: env}
}

// create runs `kubectl create servingcertrequest ARGS...`. kubectl hands the plugin only what follows
// the plugin's name, so every flag comes after it.
func (r *pluginRunner) create(args ...string) pluginRun {
	r.t.Helper()
	return r.kubectl(append([]string{"create", "servingcertrequest"}, args...)...)
}

// kubectl runs the real kubectl with args.
func (r *pluginRunner) kubectl(args ...string) pluginRun {
	r.t.Helper()
	cmd := exec.Command(e2etest.KubectlPath(r.t), args...)
	cmd.Env = r.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := pluginRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		r.t.Fatalf("running kubectl %s: %v", strings.Join(args, " "), err)
	}
	return res
}

// succeeded fails the test unless the run exited 0.
func (p pluginRun) succeeded(t *testing.T) pluginRun {
	t.Helper()
	if p.code != 0 {
		t.Fatalf("exit code %d\nstdout: %s\nstderr: %s", p.code, p.stdout, p.stderr)
	}
	return p
}

// failedWith fails the test unless the run exited non-zero with every one of msgs on stderr.
func (p pluginRun) failedWith(t *testing.T, msgs ...string) {
	t.Helper()
	if p.code == 0 {
		t.Fatalf("exit code 0, want a failure\nstdout: %s\nstderr: %s", p.stdout, p.stderr)
	}
	for _, m := range msgs {
		if !strings.Contains(p.stderr, m) {
			t.Errorf("stderr lacks %q:\n%s", m, p.stderr)
		}
	}
}

func TestPlugin(t *testing.T) {
	ctx := context.Background()
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.SecretNamespace(t, kube)
	scrs := c.CertapiV1alpha1().ServingCertRequests(ns)
	kubectlCreate := newPluginRunner(t, buildPlugin(t)).create

	notCreated := func(t *testing.T, ns, name string) {
		t.Helper()
		_, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, name, metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Fatalf("get %s/%s: %v, want NotFound", ns, name, err)
		}
	}

	t.Run("kubectl finds the plugin and its help", func(t *testing.T) {
		out := kubectlCreate("--help").succeeded(t).stdout
		for _, s := range []string{"kubectl create servingcertrequest NAME --service=SVC", "Examples:", "--dns-name", "--wait", "--kubeconfig"} {
			if !strings.Contains(out, s) {
				t.Errorf("--help lacks %q", s)
			}
		}
	})

	t.Run("create", func(t *testing.T) {
		res := kubectlCreate("web", "-n", ns, "--service=web",
			"--dns-name=Alias."+ns+".svc.", "--dns-name=*.web."+ns+".svc",
			"--duration=48h", "--renew-before=12h", "--key-algorithm=ecdsap384").succeeded(t)
		if res.stdout != "servingcertrequest.certapi.dev/web created\n" {
			t.Fatalf("stdout %q", res.stdout)
		}
		got, err := scrs.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := got.Spec
		if s.ServiceName != "web" || s.Duration.Duration != 48*time.Hour || s.RenewBefore.Duration != 12*time.Hour ||
			s.KeyAlgorithm != certapiv1alpha1.KeyAlgorithmECDSAP384 || s.SecretName != "" {
			t.Fatalf("spec %+v", s)
		}
		if want := []string{"alias." + ns + ".svc", "*.web." + ns + ".svc"}; strings.Join(s.DNSNames, ",") != strings.Join(want, ",") {
			t.Fatalf("dnsNames %q, want the server's normalised %q", s.DNSNames, want)
		}
		var managed bool
		for _, m := range got.ManagedFields {
			managed = managed || (m.Manager == "kubectl-create" && m.Operation == metav1.ManagedFieldsOperationUpdate)
		}
		if !managed {
			t.Fatalf("no Update entry for field manager kubectl-create: %+v", got.ManagedFields)
		}

		again := kubectlCreate("web", "-n", ns, "--service=web")
		again.failedWith(t, `Error from server (AlreadyExists): servingcertrequests.certapi.dev "web" already exists`)
	})

	t.Run("client dry run prints YAML and sends nothing", func(t *testing.T) {
		res := kubectlCreate("client-only", "-n", ns, "--service=web", "--secret=web-tls", "--dry-run=client", "-o", "yaml").succeeded(t)
		var obj certapiv1alpha1.ServingCertRequest
		if err := yaml.UnmarshalStrict([]byte(res.stdout), &obj); err != nil {
			t.Fatalf("not a ServingCertRequest: %v\n%s", err, res.stdout)
		}
		if obj.APIVersion != "certapi.dev/v1alpha1" || obj.Kind != "ServingCertRequest" || obj.Name != "client-only" ||
			obj.Namespace != ns || obj.Spec.ServiceName != "web" || obj.Spec.SecretName != "web-tls" {
			t.Fatalf("printed %+v\n%s", obj, res.stdout)
		}
		if obj.Spec.Duration != nil {
			t.Fatalf("a client dry run shows the server's defaults: %s", res.stdout)
		}
		notCreated(t, ns, "client-only")
	})

	t.Run("server dry run stores nothing", func(t *testing.T) {
		res := kubectlCreate("server-only", "-n", ns, "--service=web", "--dry-run=server").succeeded(t)
		if res.stdout != "servingcertrequest.certapi.dev/server-only created (server dry run)\n" {
			t.Fatalf("stdout %q", res.stdout)
		}
		res = kubectlCreate("server-only", "-n", ns, "--service=web", "--dry-run=server", "-o", "json").succeeded(t)
		var obj certapiv1alpha1.ServingCertRequest
		if err := yaml.UnmarshalStrict([]byte(res.stdout), &obj); err != nil {
			t.Fatalf("not a ServingCertRequest: %v\n%s", err, res.stdout)
		}
		if obj.Spec.Duration == nil || obj.Spec.Duration.Duration != certapiv1alpha1.DefaultDuration || obj.Spec.KeyAlgorithm != certapiv1alpha1.KeyAlgorithmECDSAP256 {
			t.Fatalf("the server's defaults are missing, so the server did not answer:\n%s", res.stdout)
		}
		notCreated(t, ns, "server-only")
	})

	t.Run("the server's field message on an invalid request", func(t *testing.T) {
		res := kubectlCreate("too-short", "-n", ns, "--service=web", "--duration=30m")
		res.failedWith(t, `The ServingCertRequest "too-short" is invalid`, "spec.duration", "must be from 1h to 2160h")
		t.Logf("stderr: %s", res.stderr)
		if res.stdout != "" {
			t.Errorf("stdout %q", res.stdout)
		}
		notCreated(t, ns, "too-short")
	})

	t.Run("local checks", func(t *testing.T) {
		kubectlCreate("bad-key", "-n", ns, "--service=web", "--key-algorithm=DSA").
			failedWith(t, `error: invalid --key-algorithm "DSA": must be one of ECDSAP256, ECDSAP384, RSA2048, RSA3072, RSA4096`)
		kubectlCreate("no-service", "-n", ns).failedWith(t, `error: required flag(s) "service" not set`)
		kubectlCreate("-n", ns, "--service=web").failedWith(t, "error: exactly one NAME is required, got 0")
		notCreated(t, ns, "bad-key")
		notCreated(t, ns, "no-service")
	})

	t.Run("secret and wait", func(t *testing.T) {
		res := kubectlCreate("webhook", "-n", ns, "--service=webhook", "--secret=webhook-tls", "--wait", "--timeout=60s").succeeded(t)
		if want := "servingcertrequest.certapi.dev/webhook created\nservingcertrequest.certapi.dev/webhook condition met\n"; res.stdout != want {
			t.Fatalf("stdout %q, want %q", res.stdout, want)
		}
		// Ready=True means the Secret holds a current certificate: no polling here.
		secret, err := kube.CoreV1().Secrets(ns).Get(ctx, "webhook-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the Secret after --wait: %v", err)
		}
		verifySecret(t, secret, "webhook", ns)

		// With -o, the Ready object is printed once it is Ready.
		res = kubectlCreate("webhook2", "-n", ns, "--service=webhook2", "--secret=webhook2-tls", "--wait", "-o", "yaml").succeeded(t)
		var obj certapiv1alpha1.ServingCertRequest
		if err := yaml.UnmarshalStrict([]byte(res.stdout), &obj); err != nil {
			t.Fatalf("not a ServingCertRequest: %v\n%s", err, res.stdout)
		}
		if !meta.IsStatusConditionTrue(obj.Status.Conditions, "Ready") || obj.Status.Certificate == "" {
			t.Fatalf("printed a request that is not Ready:\n%s", res.stdout)
		}
		secret, err = kube.CoreV1().Secrets(ns).Get(ctx, "webhook2-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the Secret after --wait: %v", err)
		}
		verifySecret(t, secret, "webhook2", ns)
	})

	t.Run("wait times out with what the Ready condition says", func(t *testing.T) {
		foreign := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "taken"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": []byte("not ours"), "tls.key": []byte("not ours either")}}
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// certapi reports the conflict within about a second (its status write interval); the timeout
		// leaves room for a busy machine.
		res := kubectlCreate("claims-taken", "-n", ns, "--service=web", "--secret=taken", "--wait", "--timeout=5s")
		t.Logf("stderr: %s", res.stderr)
		res.failedWith(t, "error: timed out after 5s waiting for servingcertrequest.certapi.dev/claims-taken to be Ready: Ready=False, reason SecretConflict")
		if res.stdout != "servingcertrequest.certapi.dev/claims-taken created\n" {
			t.Errorf("stdout %q", res.stdout)
		}
	})

	t.Run("--kubeconfig and -n", func(t *testing.T) {
		// A copy of the admin kubeconfig whose context's namespace is another one; KUBECONFIG still names
		// the original, which has none (so "default").
		other := e2etest.Namespace(t, kube)
		cfg, err := clientcmd.LoadFromFile(cp.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Contexts[cfg.CurrentContext].Namespace = other
		copied := filepath.Join(t.TempDir(), "kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, copied); err != nil {
			t.Fatal(err)
		}

		kubectlCreate("from-copy", "--kubeconfig", copied, "--service=web").succeeded(t)
		if _, err := c.CertapiV1alpha1().ServingCertRequests(other).Get(ctx, "from-copy", metav1.GetOptions{}); err != nil {
			t.Fatalf("not in the namespace of --kubeconfig's context: %v", err)
		}
		notCreated(t, metav1.NamespaceDefault, "from-copy")

		kubectlCreate("from-flag", "--kubeconfig", copied, "-n", ns, "--service=web").succeeded(t)
		if _, err := scrs.Get(ctx, "from-flag", metav1.GetOptions{}); err != nil {
			t.Fatalf("not in the namespace of -n: %v", err)
		}
		notCreated(t, other, "from-flag")
	})
}
