package clientmodule

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/framework"
)

// The example's names (artifacts/examples/webhook/manifests).
const (
	exampleDir       = "artifacts/examples/webhook"
	webhookNamespace = "example-webhook"
	webhookName      = "example-webhook" // the ServiceAccount, ServingCertRequest, Service and configuration
	validateLabel    = "example.certapi.dev/validate"
	// refusal is part of the example's message for a ConfigMap it refuses.
	refusal = "the certapi example webhook refuses those"
)

// operatorBuild is one operator's binary and the module versions linked into it.
type operatorBuild struct {
	name, bin string
	deps      map[string]string
}

// buildOperator builds the operator of test/clientmodule/<name> in its own module, as its authors would,
// and every package of the client modules with that module's versions (the operator links only some of
// them), and reads back from the binary which client-go and controller-runtime it linked.
func buildOperator(t *testing.T, root, name, out string) operatorBuild {
	t.Helper()
	dir := filepath.Join(root, "test", "clientmodule", name)
	begin := time.Now()
	mustGo(t, dir, "build", "-o", out, ".")
	built := time.Since(begin)
	patterns := []string{"build"}
	for _, m := range clientModules {
		patterns = append(patterns, modulePrefix+m+"/...")
	}
	mustGo(t, dir, patterns...)
	info, err := buildinfo.ReadFile(out)
	if err != nil {
		t.Fatalf("reading the build information of %s: %v", out, err)
	}
	b := operatorBuild{name: name, bin: out, deps: map[string]string{}}
	for _, d := range info.Deps {
		b.deps[d.Path] = d.Version
	}
	t.Logf("%s: built in %s (and every client module package in %s more); links k8s.io/client-go %s, sigs.k8s.io/controller-runtime %s, with %s",
		name, built.Round(time.Millisecond), (time.Since(begin) - built).Round(time.Millisecond),
		b.deps["k8s.io/client-go"], b.deps["sigs.k8s.io/controller-runtime"], info.GoVersion)
	want := selected(t, dir, "k8s.io/client-go", "sigs.k8s.io/controller-runtime")
	for path, version := range want {
		if b.deps[path] != version {
			t.Errorf("%s links %s %s; its go.mod selects %s", name, path, b.deps[path], version)
		}
	}
	return b
}

// TestOperatorsServeWebhooksKubeAPIServerCalls builds the older and the current operator, then runs each,
// one after the other on the same port, against one control plane with a real certapi: each starts with
// no certificate, as the example's ServiceAccount with only the example's RBAC, gets its certificate from
// certapi through pkg/servingcert and becomes Ready; kube-apiserver, trusting the caBundle certapi
// injected into the example's ValidatingWebhookConfiguration, calls it and enforces its answers; and it
// stops cleanly on SIGTERM.
func TestOperatorsServeWebhooksKubeAPIServerCalls(t *testing.T) {
	root := repoRoot(t)
	bins := t.TempDir()
	var builds []operatorBuild
	for _, name := range operators {
		builds = append(builds, buildOperator(t, root, name, filepath.Join(bins, name)))
	}
	if t.Failed() {
		t.FailNow()
	}

	begin := time.Now()
	cp := framework.StartT(t, framework.Options{})
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	certapi, err := versioned.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	manifests := filepath.Join(root, exampleDir, "manifests")
	if _, err := cp.Kubectl(ctx, "apply", "-f", filepath.Join(manifests, "namespace.yaml"), "-f", filepath.Join(manifests, "rbac.yaml"),
		"-f", filepath.Join(manifests, "servingcertrequest.yaml")); err != nil {
		t.Fatal(err)
	}
	kubeconfig := serviceAccountKubeconfig(t, cp, kube)
	ports, err := framework.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	port := int32(ports[0]) //nolint:gosec // a TCP port
	register(t, kube, root, port)
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "validated", Labels: map[string]string{validateLabel: "enabled"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("control plane up and the example's objects in place in %s", time.Since(begin).Round(time.Millisecond))

	for _, b := range builds {
		t.Run(b.name, func(t *testing.T) {
			runOperator(t, cp, kube, b, kubeconfig, port, []byte(ca.Status.CABundle))
		})
	}
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the example's ServiceAccount: the operator
// runs with its RBAC (manifests/rbac.yaml) and nothing more, as in a cluster.
func serviceAccountKubeconfig(t *testing.T, cp *framework.ControlPlane, kube kubernetes.Interface) string {
	t.Helper()
	expiry := int64(time.Hour / time.Second)
	tr, err := kube.CoreV1().ServiceAccounts(webhookNamespace).CreateToken(context.Background(), webhookName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token for ServiceAccount %s/%s: %v", webhookNamespace, webhookName, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["certapi"] = &clientcmdapi.Cluster{Server: cp.APIServerURL, CertificateAuthorityData: cp.AdminConfig.CAData}
	cfg.AuthInfos[webhookName] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[webhookName] = &clientcmdapi.Context{Cluster: "certapi", AuthInfo: webhookName}
	cfg.CurrentContext = webhookName
	path := filepath.Join(t.TempDir(), "operator.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// register creates the Service (ExternalName localhost: no Pods run here) and the example's own
// ValidatingWebhookConfiguration with the local port, and waits for certapi to inject its caBundle.
func register(t *testing.T, kube kubernetes.Interface, root string, port int32) {
	t.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Services(webhookNamespace).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: webhookName},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	decodeYAMLFile(t, filepath.Join(root, exampleDir, "manifests", "validatingwebhookconfiguration.yaml"), vwc)
	for i := range vwc.Webhooks {
		if s := vwc.Webhooks[i].ClientConfig.Service; s != nil {
			s.Port = &port
		}
	}
	vwcs := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := vwcs.Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = vwcs.Delete(context.Background(), vwc.Name, metav1.DeleteOptions{}) })
	err := framework.PollUntil(ctx, 100*time.Millisecond, time.Minute, "certapi to inject the caBundle of "+vwc.Name, nil,
		func(ctx context.Context) (bool, string) {
			got, err := vwcs.Get(ctx, vwc.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return len(got.Webhooks) > 0 && len(got.Webhooks[0].ClientConfig.CABundle) > 0, "no caBundle yet"
		})
	if err != nil {
		t.Fatal(err)
	}
}

// runOperator starts one operator, waits until it is Ready and kube-apiserver calls it, checks what it
// serves, and stops it.
func runOperator(t *testing.T, cp *framework.ControlPlane, kube kubernetes.Interface, b operatorBuild, kubeconfig string, port int32, caBundle []byte) {
	ctx := context.Background()
	health, err := framework.FreePorts(1, int(port))
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(cp.Dir, "logs", "operator-"+b.name+".log")
	begin := time.Now()
	p, err := framework.StartProcess("operator-"+b.name, logPath, b.bin, []string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + webhookNamespace,
		"--request=" + webhookName,
		"--bind-address=127.0.0.1",
		"--port=" + strconv.Itoa(int(port)),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(health[0]),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(10 * time.Second) })
	procs := []*framework.Process{p}

	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", health[0])
	client := &http.Client{Timeout: 2 * time.Second}
	if err := framework.PollUntil(ctx, 100*time.Millisecond, time.Minute, b.name+" to be Ready ("+readyz+")", procs, func(ctx context.Context) (bool, string) {
		body, code, err := framework.HTTPGet(ctx, client, readyz)
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("HTTP %d: %s", code, body)
	}); err != nil {
		t.Fatal(err)
	}
	ready := time.Since(begin)

	// What kube-apiserver checks: a certificate for the Service's name, from certapi's CA.
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caBundle) {
		t.Fatal("certapi's CA bundle holds no certificate")
	}
	serverName := webhookName + "." + webhookNamespace + ".svc"
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))),
		&tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("%s's certificate does not verify for %s against certapi's CA bundle: %v", b.name, serverName, err)
	}
	leaf := conn.ConnectionState().PeerCertificates[0]
	_ = conn.Close()

	// kube-apiserver calls the webhook and enforces its answer. The operator before this one was stopped,
	// and the configuration fails closed, so only this one can refuse or allow. Server-side dry runs
	// store nothing.
	forbidden := &corev1.ConfigMap{}
	decodeYAMLFile(t, filepath.Join(repoRoot(t), exampleDir, "forbidden-configmap.yaml"), forbidden)
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if err := framework.PollUntil(ctx, 200*time.Millisecond, time.Minute, "kube-apiserver to call "+b.name, procs, func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().ConfigMaps("validated").Create(ctx, forbidden, dryRun)
		return err != nil && strings.Contains(err.Error(), refusal), fmt.Sprintf("a dry run of the forbidden ConfigMap: %v", err)
	}); err != nil {
		t.Fatal(err)
	}
	allowed := forbidden.DeepCopy()
	allowed.Labels = nil
	if _, err := kube.CoreV1().ConfigMaps("validated").Create(ctx, allowed, dryRun); err != nil {
		t.Fatalf("a ConfigMap %s allows: %v", b.name, err)
	}
	called := time.Since(begin)

	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("%s did not stop cleanly on SIGTERM: %v", b.name, err)
	}
	if _, err := p.Exited(); err != nil {
		t.Fatalf("%s exited with %v", b.name, err)
	}
	t.Logf("%s: Ready %s after start (certificate serial %s for %s from certapi), called by kube-apiserver after %s",
		b.name, ready.Round(time.Millisecond), leaf.SerialNumber.Text(16), strings.Join(leaf.DNSNames, ","), called.Round(time.Millisecond))
}

// decodeYAMLFile decodes the single YAML document in path into obj, refusing unknown fields.
func decodeYAMLFile(t *testing.T, path string, obj any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	js, err := utilyaml.ToJSON(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
