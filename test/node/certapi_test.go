package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// certapiNamespace is where artifacts/deploy installs certapi.
const certapiNamespace = "certapi-system"

// testRotationGrace is the --rotation-grace the tests add to the overlay (default 1h), so that a forced
// rotation ends within a test.
const testRotationGrace = "5s"

// testServedCheckInterval is the --served-check-interval the tests add (default 2m): what no API event
// announces (a NetworkPolicy that starts dropping certapi's probes) is seen within seconds.
const testServedCheckInterval = "10s"

var install struct {
	once sync.Once
	err  error
	took time.Duration
}

// installCertapi installs certapi once per package from artifacts/deploy/overlays/single-replica as
// artifacts/deploy/README.md says (framework's InstallCertapiSingleReplica, which `make local-up NODE=1`
// runs too), with a shorter --rotation-grace and --served-check-interval, and waits until its APIService
// is Available.
func installCertapi(t *testing.T) {
	t.Helper()
	install.once.Do(func() {
		start := time.Now()
		install.err = cp.InstallCertapiSingleReplica(context.Background(), "--rotation-grace="+testRotationGrace, "--served-check-interval="+testServedCheckInterval)
		install.took = time.Since(start)
	})
	if install.err != nil {
		t.Fatalf("installing certapi from artifacts/deploy/overlays/single-replica: %v", install.err)
	}
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
	// The APIService holds exactly certapi's CA bundle, injected by certapi. (The CertificateAuthority
	// object may appear a moment after the APIService is Available.)
	agg, err := aggregatorclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the APIService Available with CertificateAuthority/default's bundle", func(ctx context.Context) (bool, string) {
		apisvc, err := agg.ApiregistrationV1().APIServices().Get(ctx, "v1alpha1.certapi.dev", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		available := false
		for _, c := range apisvc.Status.Conditions {
			available = available || (c.Type == apiregistrationv1.Available && c.Status == apiregistrationv1.ConditionTrue)
		}
		return available && !apisvc.Spec.InsecureSkipTLSVerify && len(apisvc.Spec.CABundle) > 0 && string(apisvc.Spec.CABundle) == ca.Status.CABundle,
			fmt.Sprintf("Available=%v, insecureSkipTLSVerify=%v, caBundle %d bytes, the CA's %d bytes", available, apisvc.Spec.InsecureSkipTLSVerify, len(apisvc.Spec.CABundle), len(ca.Status.CABundle))
	})

	ns := "single-replica-plugin"
	kubectl(t, "create", "namespace", ns)
	// Opt the namespace in to Secret delivery, as docs/usage.md says.
	kubectl(t, "create", "rolebinding", "certapi-secret-delivery", "-n", ns, "--clusterrole=certapi:secret-delivery", "--serviceaccount=certapi-system:certapi")
	kubectl(t, "label", "namespace", ns, "certapi.dev/secret-delivery=enabled")
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
