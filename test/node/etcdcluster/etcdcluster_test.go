// Package etcdcluster runs docs/install.md's install (the README's, with helm test added) on a control plane
// with a real node, as it is written: the release's image and Helm chart with its defaults (etcd.mode
// cluster), three certapi pods whose embedded etcd members form one cluster with no Secret made by hand;
// then the README's use of it, membership (a
// lost volume, scaling, a rolling restart, every volume lost), two of three members lost under load, and
// zero downtime under load (a rolling upgrade, a drain's evictions, a forced delete of the leader).
package etcdcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

const ns = "certapi-system"

var cp *framework.ControlPlane

// TestMain starts the cluster with its node and no image of certapi's: the README's install loads the
// release's image itself.
func TestMain(m *testing.M) {
	os.Exit(nodetest.Run(m, "certapi-node-etcdcluster-", func(context.Context, string) (map[string]string, error) {
		return nil, nil
	}, func(c *framework.ControlPlane, _ map[string]string) { cp = c }))
}

func helm(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := framework.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig, "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config", "HELM_DATA_HOME="+home+"/data")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// selector selects certapi's pods.
const selector = "app.kubernetes.io/name=certapi,app.kubernetes.io/component=apiserver"

// installDoc is the page whose install block, install-helm, the package runs; test/docs holds the README's
// cluster-install, the chart's README and high-availability.md to its lines.
const installDoc = "docs/install.md"

// installed is true once the README's install has run on this package's cluster. The tests share it (the
// APIService is cluster-wide: one certapi at a time), and each one installs it when it runs alone.
var installed bool

// install runs docs/install.md's install as it is written, unless an earlier test of the package did: the
// release's image loaded as into kind (the README's cluster-image block), then the install-helm block: the
// encryption Secret, helm install of the release's chart with its defaults (three members), kubectl
// certapi check --wait and helm test (a Pod of certapi's image runs `certapi selftest` as a client
// would); then it waits for three pods Ready and the APIService Available.
func install(t *testing.T) {
	t.Helper()
	if installed {
		return
	}
	ctx := context.Background()
	kube, _ := nodetest.Clients(t, cp)
	// Three claims now (kind's storage provisioner would make them), a fourth for certapi-0's new claim
	// after its volume is lost, two for the scale-up, three after every volume is lost.
	for i := range 9 {
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("certapi-data-%d", i), "1Gi"); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	installed = true
	shell := nodetest.NewDocShell(t, cp)
	shell.Run(t, "README.md", 10*time.Minute, "cluster-image")
	if out := shell.Run(t, installDoc, 10*time.Minute, "install-helm"); !strings.Contains(out, "Succeeded") {
		t.Fatalf("the install block's helm test did not report its Pod Succeeded:\n%s", out)
	}
	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	nodetest.Kubectl(t, cp, "wait", "--for=condition=Available", "apiservice/v1alpha1.certapi.dev", "--timeout=2m")
	t.Logf("figure: docs/install.md's install (the image loaded, helm install, check --wait, helm test) to three members and the APIService Available: %s", time.Since(start).Round(time.Second))
}

// installed3 is the start of a test that disrupts the README's install: the install (unless done), the
// pods' logs on failure, three pods Ready, and the CAs as they are before (an earlier test of the package
// may have left a Retiring one), to compare with after.
func installed3(t *testing.T) (kubernetes.Interface, versioned.Interface, string) {
	t.Helper()
	kube, certapi := nodetest.Clients(t, cp)
	nodetest.LogPodsOnFailure(t, cp, ns, 5)
	install(t)
	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return kube, certapi, nodetest.CACertificates(ca)
}

// TestChartClusterMode: docs/install.md's install (the release's chart with its defaults: etcd.mode cluster,
// three replicas) forms one etcd cluster of three certapi pods (no Secret made by hand but the encryption
// configuration), and its use of certapi works on it; certapi-0 losing its volume
// rejoins the running cluster (it does not bootstrap a second one); `kubectl scale` 3 -> 5 -> 3 adds two
// members and removes them again; `kubectl rollout restart` restarts every member on its data; the CA
// stays the same throughout; when every volume is lost the members report having no data and certapi-0
// bootstraps a new cluster without a person.
func TestChartClusterMode(t *testing.T) {
	ctx := context.Background()
	kube, certapi := nodetest.Clients(t, cp)
	nodetest.LogPodsOnFailure(t, cp, ns, 5)
	install(t)
	readmeUse(t)

	nodetest.Logged(t, cp, ns, "certapi-0", `action="Bootstrap"`, "Etcd member is ready")
	for _, pod := range []string{"certapi-1", "certapi-2"} {
		nodetest.Logged(t, cp, ns, pod, `action="Join"`, "Added this member as an etcd learner", "Promoted this etcd learner to a voting member")
	}
	sec, err := kube.CoreV1().Secrets(ns).Get(ctx, "certapi-etcd-peer-ca", metav1.GetOptions{})
	if err != nil || sec.Annotations[incluster.AnnotationBootstrapped] == "" {
		t.Fatalf("the peer CA Secret: %v, annotations %v", err, sec.GetAnnotations())
	}
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil || len(ca.Status.Certificates) != 1 {
		t.Fatalf("want exactly one CA: %v %+v", err, ca)
	}
	firstCA := ca.Status.Active.SubjectKeyID

	t.Log("certapi-0 loses its volume")
	start := time.Now()
	nodetest.Kubectl(t, cp, "-n", ns, "delete", "pvc", "data-certapi-0", "--wait=false")
	nodetest.Kubectl(t, cp, "-n", ns, "delete", "pod", "certapi-0")
	nodetest.WaitFor(t, 5*time.Minute, "certapi-0 back on a new claim, three pods Ready", func(ctx context.Context) (bool, string) {
		pvc, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data-certapi-0", metav1.GetOptions{})
		if err != nil || pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName == "" {
			return false, fmt.Sprintf("claim: %v", err)
		}
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	nodetest.Logged(t, cp, ns, "certapi-0", `action="Join"`, "Removed a stale etcd member entry of this member", "Promoted this etcd learner to a voting member")
	t.Logf("figure: a member whose volume was deleted replaced (pod recreated on a new claim, joined, Ready): %s", time.Since(start).Round(time.Second))
	ca, err = certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil || ca.Status.Active.SubjectKeyID != firstCA || len(ca.Status.Certificates) != 1 {
		t.Fatalf("the CA changed after certapi-0 lost its volume: %v %+v", err, ca.Status.Certificates)
	}

	t.Log("kubectl scale 3 -> 5 -> 3")
	start = time.Now()
	nodetest.Kubectl(t, cp, "-n", ns, "scale", "statefulset/certapi", "--replicas=5")
	nodetest.WaitFor(t, 5*time.Minute, "five certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 5)
	})
	for _, pod := range []string{"certapi-3", "certapi-4"} {
		nodetest.Logged(t, cp, ns, pod, `action="Join"`, "Promoted this etcd learner to a voting member")
	}
	t.Logf("figure: scaled 3 -> 5, both new members promoted: %s", time.Since(start).Round(time.Second))
	start = time.Now()
	nodetest.Kubectl(t, cp, "-n", ns, "scale", "statefulset/certapi", "--replicas=3")
	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	// The etcd leader removes the two members as soon as their pods stop, without the 10m timeout.
	nodetest.WaitFor(t, 2*time.Minute, "the etcd leader to remove certapi-3 and certapi-4", func(ctx context.Context) (bool, string) {
		removed := 0
		for i := range 3 {
			out, _ := nodetest.KubectlErr(cp, "-n", ns, "logs", fmt.Sprintf("certapi-%d", i))
			for _, m := range []string{"certapi-3", "certapi-4"} {
				if strings.Contains(out, `"Removed a dead etcd member" logger="etcd-member" member="`+m+`"`) {
					removed++
				}
			}
		}
		return removed == 2, fmt.Sprintf("%d removed", removed)
	})
	t.Logf("figure: scaled 5 -> 3, both members removed: %s", time.Since(start).Round(time.Second))

	t.Log("kubectl rollout restart: every member restarts on its data")
	start = time.Now()
	nodetest.Kubectl(t, cp, "-n", ns, "rollout", "restart", "statefulset/certapi")
	nodetest.Kubectl(t, cp, "-n", ns, "rollout", "status", "statefulset/certapi", "--timeout=5m")
	for i := range 3 {
		nodetest.Logged(t, cp, ns, fmt.Sprintf("certapi-%d", i), `action="Restart"`, "Etcd member is ready")
	}
	nodetest.Kubectl(t, cp, "wait", "--for=condition=Available", "apiservice/v1alpha1.certapi.dev", "--timeout=2m")
	t.Logf("figure: kubectl rollout restart of three members: %s", time.Since(start).Round(time.Second))

	ca, err = certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil || ca.Status.Active.SubjectKeyID != firstCA {
		t.Fatalf("the CA changed through the scaling and the rolling restart: %v", err)
	}

	t.Log("every volume lost: the members report having no data, certapi-0 bootstraps a new cluster")
	start = time.Now()
	for i := range 5 {
		nodetest.Kubectl(t, cp, "-n", ns, "delete", "pvc", fmt.Sprintf("data-certapi-%d", i), "--wait=false", "--ignore-not-found")
	}
	nodetest.Kubectl(t, cp, "-n", ns, "delete", "pod", "certapi-0", "certapi-1", "certapi-2")
	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready on new claims", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	// Which reason certapi-0 gives depends on how far the other pods have come when it looks: every member
	// reporting that it has no data, or no other member there yet. Either way it bootstraps alone.
	nodetest.Logged(t, cp, ns, "certapi-0", `action="Bootstrap"`, "Etcd member is ready")
	nodetest.Kubectl(t, cp, "wait", "--for=condition=Available", "apiservice/v1alpha1.certapi.dev", "--timeout=2m")
	t.Logf("figure: every volume lost, to a new cluster of three and the APIService Available: %s", time.Since(start).Round(time.Second))
	// Without a backup the data is gone: a new cluster, and certapi makes exactly one new CA on it. The
	// chart's defaults leave --keep-published-cas off, so the lost CA, which it had published, is not
	// trusted again (docs/backup-and-restore.md).
	nodetest.WaitFor(t, 2*time.Minute, "exactly one new CA, the lost one not kept", func(ctx context.Context) (bool, string) {
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(ca.Status.Certificates) == 1 && ca.Status.Active.SubjectKeyID != "" && ca.Status.Active.SubjectKeyID != firstCA,
			fmt.Sprintf("%+v", ca.Status.Certificates)
	})
}

// myWebhook is the user's own webhook configuration that the README's cluster-use block annotates: its
// Service is the one the block's request names. failurePolicy Ignore and a resource nobody has: it is
// never called.
const myWebhook = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: my-webhook
webhooks:
- name: my-webhook.webhooks.svc
  clientConfig:
    service: {namespace: webhooks, name: my-webhook, path: /validate}
  rules:
  - {apiGroups: [example.com], apiVersions: [v1], resources: [widgets], operations: [CREATE]}
  failurePolicy: Ignore
  sideEffects: None
  admissionReviewVersions: [v1]
`

// readmeUse runs the README's cluster-use block against the installed certapi, as written, with the
// namespace and webhook configuration a user would already have: the request becomes Ready with its
// Secret, and the annotated configuration gets the CA bundle.
func readmeUse(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	kube, certapi := nodetest.Clients(t, cp)
	nodetest.Kubectl(t, cp, "create", "namespace", "webhooks")
	path := filepath.Join(t.TempDir(), "my-webhook.yaml")
	if err := os.WriteFile(path, []byte(myWebhook), 0o644); err != nil {
		t.Fatal(err)
	}
	nodetest.Kubectl(t, cp, "apply", "-f", path)
	t.Cleanup(func() {
		_, _ = nodetest.KubectlErr(cp, "delete", "validatingwebhookconfiguration", "my-webhook", "--ignore-not-found")
		_, _ = nodetest.KubectlErr(cp, "delete", "namespace", "webhooks", "--ignore-not-found", "--wait=false")
	})
	nodetest.RunReadmeBlocks(t, cp, 3*time.Minute, "cluster-use")
	if _, err := kube.CoreV1().Secrets("webhooks").Get(ctx, "my-webhook-tls", metav1.GetOptions{}); err != nil {
		t.Errorf("the Secret of the README's request: %v", err)
	}
	nodetest.WaitFor(t, time.Minute, "my-webhook's caBundle to be certapi's bundle", func(ctx context.Context) (bool, string) {
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		vwc, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "my-webhook", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got := string(vwc.Webhooks[0].ClientConfig.CABundle)
		return got != "" && got == ca.Status.CABundle, fmt.Sprintf("caBundle %d bytes, the CA's %d", len(got), len(ca.Status.CABundle))
	})
}
