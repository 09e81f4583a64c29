package node

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/test/node/nodetest"
)

// certapiNamespace is where artifacts/deploy installs certapi.
const certapiNamespace = "certapi-system"

// testRotationGrace is the --rotation-grace the tests add to the overlay (default 1h), so that a forced
// rotation ends within a test.
const testRotationGrace = "5s"

var install struct {
	once sync.Once
	err  error
	took time.Duration
}

// installCertapi installs certapi once per package as artifacts/deploy/README.md says for the
// single-replica overlay: the namespace, the Secret certapi-encryption-config, then `kubectl apply -k` of
// the overlay with the node's image (and imagePullPolicy Never, and a shorter --rotation-grace), plus the
// PersistentVolume a cluster's storage would provision for its claim. It waits until the APIService is
// Available.
func installCertapi(t *testing.T) {
	t.Helper()
	install.once.Do(func() {
		start := time.Now()
		// Stays set when doInstallCertapi ends the test (t.Fatal) midway.
		install.err = errors.New("the first test that installed it failed")
		install.err = doInstallCertapi(t)
		install.took = time.Since(start)
	})
	if install.err != nil {
		t.Fatalf("installing certapi from artifacts/deploy/overlays/single-replica: %v", install.err)
	}
}

func doInstallCertapi(t *testing.T) error {
	if _, err := kubectlErr("apply", "-f", nodetest.RepoPath(t, "artifacts/deploy/base/namespace.yaml")); err != nil {
		return err
	}
	nodetest.EncryptionConfigSecret(t, cp)
	// The volume a storage class would provision for the claim certapi-data.
	nodetest.HostPathPV(t, cp, "certapi-data", "1Gi")
	dir := kustomization(t, "artifacts/deploy/overlays/single-replica", map[string]string{"ghcr.io/certapi/certapi": images["certapi"]}, `- target:
    kind: Deployment
    name: certapi
  patch: |-
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --rotation-grace=`+testRotationGrace+`
`)
	if _, err := kubectlErr("apply", "-k", dir); err != nil {
		return err
	}
	if _, err := kubectlErr("-n", certapiNamespace, "rollout", "status", "deployment/certapi", "--timeout=5m"); err != nil {
		return err
	}
	_, err := kubectlErr("wait", "--for=condition=Available", "apiservice/v1alpha1.certapi.dev", "--timeout=2m")
	return err
}

// TestSingleReplicaOverlay installs certapi from artifacts/deploy/overlays/single-replica as a user does:
// certapi starts as a pod with no pre-made Secret or certificate, serves itself with a certificate of its
// own CA, injects that CA into its own APIService, the APIService becomes Available, and then
// `kubectl create servingcertrequest --secret --wait` (the plugin in _output/bin) gets a request Ready with
// its Secret delivered.
func TestSingleReplicaOverlay(t *testing.T) {
	pluginBinary(t, "kubectl-create-servingcertrequest")
	installCertapi(t)
	t.Logf("certapi installed and its APIService Available %s after `kubectl apply -k`", install.took.Round(time.Millisecond))
	kube, certapi := clients(t)
	ctx := context.Background()

	// No Secret but the encryption configuration the admin made: certapi's serving certificate is in its
	// memory only.
	secrets, err := kube.CoreV1().Secrets(certapiNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secrets.Items {
		if s.Name != "certapi-encryption-config" {
			t.Errorf("unexpected Secret %s/%s", s.Namespace, s.Name)
		}
	}
	// The APIService holds exactly certapi's CA bundle, injected by certapi.
	agg, err := aggregatorclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	apisvc, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1alpha1.certapi.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(apisvc.Spec.CABundle) == 0 || string(apisvc.Spec.CABundle) != string(ca.Status.CABundle) {
		t.Errorf("APIService caBundle (%d bytes) is not CertificateAuthority/default's bundle (%d bytes)", len(apisvc.Spec.CABundle), len(ca.Status.CABundle))
	}
	if apisvc.Spec.InsecureSkipTLSVerify {
		t.Error("APIService skips TLS verification")
	}
	available := false
	for _, c := range apisvc.Status.Conditions {
		available = available || (c.Type == apiregistrationv1.Available && c.Status == apiregistrationv1.ConditionTrue)
	}
	if !available {
		t.Errorf("APIService not Available: %+v", apisvc.Status.Conditions)
	}

	ns := "single-replica-plugin"
	kubectl(t, "create", "namespace", ns)
	// --wait needs something to wait for: with --secret the request is Ready once certapi has delivered
	// the Secret.
	out := kubectl(t, "create", "servingcertrequest", "demo", "-n", ns, "--service=demo", "--secret=demo-tls", "--wait")
	t.Logf("kubectl create servingcertrequest: %s", strings.TrimSpace(out))
	scr, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range scr.Status.Conditions {
		ready = ready || (c.Type == certapiv1alpha1.ConditionReady && c.Status == metav1.ConditionTrue)
	}
	if !ready || scr.Status.Certificate == "" {
		t.Errorf("ServingCertRequest %s/demo not Ready with a certificate: %+v", ns, scr.Status.Conditions)
	}
	if _, err := kube.CoreV1().Secrets(ns).Get(ctx, "demo-tls", metav1.GetOptions{}); err != nil {
		t.Errorf("the Secret certapi delivers: %v", err)
	}
}
