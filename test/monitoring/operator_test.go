package monitoring

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// envOperatorConfigBin overrides where the tests find prometheus-operator-config.
const envOperatorConfigBin = "PROMETHEUS_OPERATOR_CONFIG_BIN"

// operatorConfigBinary returns prometheus-operator-config: $PROMETHEUS_OPERATOR_CONFIG_BIN if set,
// otherwise <repo>/_output/bin/prometheus-operator-config, which `hack/build-tools.sh prometheus` builds
// from the module hack/tools/prometheus-operator.
func operatorConfigBinary() (string, error) {
	if p := os.Getenv(envOperatorConfigBin); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", envOperatorConfigBin, p, err)
		}
		return p, nil
	}
	root, err := framework.RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "_output", "bin", "prometheus-operator-config")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("prometheus-operator-config not found at %s: run `hack/build-tools.sh prometheus` (or set %s): %w", p, envOperatorConfigBin, err)
	}
	return p, nil
}

// renderServiceMonitor returns what the chart renders for templates/servicemonitor.yaml (its
// ServiceMonitor, the ConfigMap certapi injects its CA into, the metrics ServiceAccount, its token Secret
// and binding) for release certapi in framework.CertapiNamespace, scraping every second.
func renderServiceMonitor(t *testing.T) []byte {
	t.Helper()
	helm, err := framework.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helm, "template", "certapi", filepath.Join(root, "artifacts", "charts", "certapi"),
		"--namespace", framework.CertapiNamespace, "--show-only", "templates/servicemonitor.yaml",
		"--set", "monitoring.serviceMonitor.enabled=true", "--set", "monitoring.serviceMonitor.interval=1s")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, stderr.String())
	}
	return out
}

// operatorPrometheusConfig sets certapi up in cp's cluster as the chart's ServiceMonitor finds it in a
// real one (its Service carrying the chart's selector labels, Endpoints with its port https, the
// ConfigMap the chart renders, into which certapi injects its CA, and the token Secret the ServiceMonitor
// names) and returns the Prometheus configuration that the Prometheus Operator's own code generates from
// the chart's ServiceMonitor (prometheus-operator-config): Kubernetes service discovery through cp's
// kube-apiserver and the operator's relabelling, so that the series carry the labels they carry under
// the operator. It writes the configuration's TLS assets (certapi's CA) under dir.
//
// certapi listens on 127.0.0.1, which an Endpoints address may not be: a TCP forwarder on this machine's
// address stands for the pod's address. There is no Pod object (nothing runs pods here), so the targets
// carry no pod and container labels; the promtool tests (prometheusrule_test.yaml) have them.
func operatorPrometheusConfig(t *testing.T, cp *framework.ControlPlane, dir string) map[string]any {
	t.Helper()
	ctx := context.Background()
	kube, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	rendered := renderServiceMonitor(t)
	var sm struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Endpoints []struct {
				Authorization struct {
					Credentials corev1.SecretKeySelector `json:"credentials"`
				} `json:"authorization"`
			} `json:"endpoints"`
		} `json:"spec"`
	}
	var caConfigMap *corev1.ConfigMap
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("the chart's servicemonitor.yaml: %v", err)
		}
		switch meta.Kind {
		case "ServiceMonitor":
			if err := yaml.Unmarshal([]byte(doc), &sm); err != nil {
				t.Fatal(err)
			}
		case "ConfigMap":
			caConfigMap = &corev1.ConfigMap{}
			if err := yaml.Unmarshal([]byte(doc), caConfigMap); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 || len(sm.Spec.Endpoints) == 0 || caConfigMap == nil {
		t.Fatalf("the chart's servicemonitor.yaml has no ServiceMonitor with a selector and endpoints, or no CA ConfigMap:\n%s", rendered)
	}
	if err := os.WriteFile(filepath.Join(dir, "servicemonitor.yaml"), rendered, 0o644); err != nil {
		t.Fatal(err)
	}

	// The Service the ServiceMonitor selects: the framework's, with the chart's selector labels.
	svcs := kube.CoreV1().Services(framework.CertapiNamespace)
	svc, err := svcs.Get(ctx, framework.CertapiServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Labels == nil {
		svc.Labels = map[string]string{}
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		svc.Labels[k] = v
	}
	if _, err := svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	addr := forwardTCP(t, testhelpers.HostIP(t), strings.TrimPrefix(cp.CertapiURL, "https://"))
	host, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	endpoints := &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: framework.CertapiServiceName, Namespace: framework.CertapiNamespace},
		Subsets: []corev1.EndpointSubset{{
			Addresses: []corev1.EndpointAddress{{IP: host}},
			Ports:     []corev1.EndpointPort{{Name: "https", Port: int32(port), Protocol: corev1.ProtocolTCP}}, //nolint:gosec // a TCP port
		}},
	}
	if _, err := kube.CoreV1().Endpoints(framework.CertapiNamespace).Create(ctx, endpoints, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The chart's CA ConfigMap, which certapi fills; and the token Secret, filled as kube-controller-manager
	// (not running here) fills the chart's: with a token that may get /metrics and /metrics/slis only.
	caConfigMap.Namespace = framework.CertapiNamespace
	if _, err := kube.CoreV1().ConfigMaps(framework.CertapiNamespace).Create(ctx, caConfigMap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testhelpers.Eventually(t, 500*time.Millisecond, time.Minute, "certapi to inject its CA into ConfigMap "+caConfigMap.Name, func(ctx context.Context) (bool, error) {
		cm, err := kube.CoreV1().ConfigMaps(framework.CertapiNamespace).Get(ctx, caConfigMap.Name, metav1.GetOptions{})
		return err == nil && strings.Contains(cm.Data["ca.crt"], "BEGIN CERTIFICATE"), nil
	})
	cred := sm.Spec.Endpoints[0].Authorization.Credentials
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cred.Name, Namespace: framework.CertapiNamespace},
		Data:       map[string][]byte{cred.Key: []byte(scraperToken(t, cp))},
	}
	if _, err := kube.CoreV1().Secrets(framework.CertapiNamespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// kube-apiserver's CA and an admin client certificate for Prometheus's service discovery.
	creds := map[string][]byte{"apiserver-ca.crt": cp.AdminConfig.CAData, "apiserver-client.crt": cp.AdminConfig.CertData, "apiserver-client.key": cp.AdminConfig.KeyData}
	for name, data := range creds {
		if len(data) == 0 {
			t.Fatalf("the framework's admin config has no %s in memory", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := operatorConfigBinary()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "prometheus.yml")
	cmd := exec.Command(bin,
		"--service-monitors", filepath.Join(dir, "servicemonitor.yaml"),
		"--kubeconfig", cp.Kubeconfig,
		"--apiserver-host", cp.APIServerURL,
		"--apiserver-ca-file", filepath.Join(dir, "apiserver-ca.crt"),
		"--apiserver-cert-file", filepath.Join(dir, "apiserver-client.crt"),
		"--apiserver-key-file", filepath.Join(dir, "apiserver-client.key"),
		"--tls-assets-dir", filepath.Join(dir, "certs"),
		"--scrape-interval", "1s", "--evaluation-interval", "1s",
		"--output", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("prometheus-operator-config: %v\n%s", err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var config map[string]any
	if err := yaml.Unmarshal(data, &config); err != nil {
		t.Fatalf("prometheus-operator-config wrote %s: %v", out, err)
	}
	// The configuration holds the bearer token inline, as the operator's does: not in the log.
	t.Logf("the Prometheus Operator's configuration for the chart's ServiceMonitor (credentials left out):\n%s",
		regexp.MustCompile(`(?m)^(\s*credentials:).*$`).ReplaceAll(data, []byte("$1 <redacted>")))
	return config
}

// forwardTCP forwards every connection to listenHost:<a free port>, which it returns, to target, until
// the test ends.
func forwardTCP(t *testing.T, listenHost, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(listenHost, "0"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
		wg    sync.WaitGroup
	)
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		conns[c] = struct{}{}
	}
	wg.Go(func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return // closed at cleanup
			}
			server, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				client.Close()
				continue
			}
			track(client)
			track(server)
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				_ = dst.Close()
				_ = src.Close()
			}
			wg.Go(func() { pipe(server, client) })
			wg.Go(func() { pipe(client, server) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}
