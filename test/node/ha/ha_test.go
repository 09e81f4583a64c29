// Package ha installs certapi on the dedicated etcd, artifacts/deploy/overlays/external-etcd (three certapi
// replicas and the three-member etcd StatefulSet of components/etcd, with TLS), on a control plane with a
// real node, as artifacts/deploy/README.md says, and disrupts it under issuance load. It has a cluster of
// its own: the overlay takes the same names as test/node's single replica.
package ha

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

// etcdImage is the test image of etcd (the etcd of `make tools`), for the StatefulSet's
// quay.io/coreos/etcd, which cannot be pulled here.
const etcdImage = "certapi-test/etcd:v3.7.0"

var (
	cp     *framework.ControlPlane
	images = map[string]string{}
)

func TestMain(m *testing.M) {
	os.Exit(nodetest.Run(m, "certapi-node-ha-", func(_ context.Context, dir string) (map[string]string, error) {
		etcdArchive := filepath.Join(dir, "etcd.tar")
		if err := buildEtcdImage(etcdArchive); err != nil {
			return nil, err
		}
		certapiArchive, err := framework.ImageArchive("certapi.tar")
		if err != nil {
			return nil, err
		}
		return map[string]string{"certapi": certapiArchive, "etcd": etcdArchive}, nil
	}, func(c *framework.ControlPlane, imgs map[string]string) { cp, images = c, imgs }))
}

// buildEtcdImage packs the etcd of `make tools` (hack/tools/etcd, v3.7.0) as /usr/local/bin/etcd, the
// command the StatefulSet runs, with the C library it is linked with.
func buildEtcdImage(out string) error {
	bin, err := framework.EtcdBinary()
	if err != nil {
		return err
	}
	return framework.BuildBinaryImage(bin, "/usr/local/bin/etcd", etcdImage, out)
}

// etcdTLSScript returns the shell recipe of artifacts/deploy/components/etcd/README.md that makes the etcd
// TLS Secrets: the first sh block after "With OpenSSL 3".
func etcdTLSScript(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(nodetest.RepoPath(t, "artifacts/deploy/components/etcd/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "With OpenSSL 3")
	if i < 0 {
		t.Fatal("no OpenSSL recipe in components/etcd/README.md")
	}
	s = s[i:]
	start := strings.Index(s, "```sh\n")
	end := strings.Index(s[start+6:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no sh block after the OpenSSL heading in components/etcd/README.md")
	}
	return s[start+6 : start+6+end]
}

// TestHAOverlay installs overlays/external-etcd as artifacts/deploy/README.md says (the etcd TLS Secrets
// with the README's OpenSSL recipe, the encryption configuration, `kubectl apply -k`), with the node's
// images and one change for a one-node cluster: the etcd members' required anti-affinity is dropped. Then, under
// issuance load through kube-apiserver (client-go, with its retries): exactly one CA; deleting the leader's
// pod and `kubectl rollout restart` fail no call and keep every call within the documented bound; the
// PodDisruptionBudget refuses a second eviction while one replica is away.
func TestHAOverlay(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kube, certapi := nodetest.Clients(t, cp)
	ctx := context.Background()
	nodetest.Kubectl(t, cp, "apply", "-f", nodetest.RepoPath(t, "artifacts/deploy/base/namespace.yaml"))
	script := exec.Command("bash", "-c", etcdTLSScript(t))
	script.Dir = t.TempDir()
	script.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig, "PATH="+filepath.Join(root, "_output", "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := script.CombinedOutput(); err != nil {
		t.Fatalf("the etcd TLS recipe of components/etcd/README.md: %v\n%s", err, out)
	}
	if err := cp.CreateEncryptionConfigSecret(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("certapi-etcd-%d", i), "4Gi"); err != nil {
			t.Fatal(err)
		}
	}
	dir := nodetest.Kustomization(t, "artifacts/deploy/overlays/external-etcd", map[string]string{
		"ghcr.io/certapi/certapi": images["certapi"],
		"quay.io/coreos/etcd":     images["etcd"],
	}, `- target:
    kind: StatefulSet
    name: certapi-etcd
  patch: |-
    - op: remove
      path: /spec/template/spec/affinity
`)
	start := time.Now()
	nodetest.Kubectl(t, cp, "apply", "-k", dir)
	nodetest.Kubectl(t, cp, "-n", "certapi-system", "rollout", "status", "statefulset/certapi-etcd", "--timeout=5m")
	nodetest.Kubectl(t, cp, "-n", "certapi-system", "rollout", "status", "deployment/certapi", "--timeout=5m")
	nodetest.Kubectl(t, cp, "wait", "--for=condition=Available", "apiservice/v1alpha1.certapi.dev", "--timeout=2m")
	t.Logf("overlays/external-etcd: 3 etcd members, 3 certapi replicas and the APIService Available %s after `kubectl apply -k`", time.Since(start).Round(time.Second))

	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ca.Status.Certificates) != 1 || ca.Status.Certificates[0].Role != certapiv1alpha1.CARoleActive {
		t.Fatalf("want exactly one CA, Active, after three replicas started on an empty etcd: %+v", ca.Status.Certificates)
	}
	firstCA := ca.Status.Active.SubjectKeyID

	ns := "ha-load"
	nodetest.Kubectl(t, cp, "create", "namespace", ns)
	nodetest.Kubectl(t, cp, "create", "servingcertrequest", "load", "-n", ns, "--service=load")
	l := nodetest.StartLoad(t, certapi, ns, "load")

	// The leader's pod deleted as `kubectl delete pod` does (graceful: certapi resigns on SIGTERM).
	leader := nodetest.LeaderPod(t, cp)
	t.Logf("deleting the leader's pod %s under load", leader)
	nodetest.Kubectl(t, cp, "-n", "certapi-system", "delete", "pod", leader, "--wait=false")
	nodetest.WaitFor(t, 2*time.Minute, "another replica leading", func(ctx context.Context) (bool, string) {
		l, err := nodetest.LeaderOf(cp)
		return err == nil && l != "" && l != leader, fmt.Sprintf("leader %q, %v", l, err)
	})
	nodetest.Kubectl(t, cp, "-n", "certapi-system", "rollout", "status", "deployment/certapi", "--timeout=5m")
	l.Check(t, "deleting the leader's pod")

	nodetest.Kubectl(t, cp, "-n", "certapi-system", "rollout", "restart", "deployment/certapi")
	nodetest.Kubectl(t, cp, "-n", "certapi-system", "rollout", "status", "deployment/certapi", "--timeout=5m")
	l.Check(t, "kubectl rollout restart")

	// The PodDisruptionBudget (maxUnavailable: 1): one eviction goes, a second one at once is refused.
	selector := "app.kubernetes.io/name=certapi,app.kubernetes.io/component=apiserver"
	nodetest.WaitFor(t, 2*time.Minute, "three certapi pods Ready, none terminating", func(ctx context.Context) (bool, string) {
		ready, why := nodetest.PodsReady(ctx, kube, "certapi-system", selector, 3)
		if !ready {
			return false, why
		}
		pods, err := kube.CoreV1().Pods("certapi-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
		return err == nil && len(pods.Items) == 3, fmt.Sprintf("%d pods", len(pods.Items))
	})
	pods, err := kube.CoreV1().Pods("certapi-system").List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil || len(pods.Items) != 3 {
		t.Fatalf("certapi's pods: %v (%d)", err, len(pods.Items))
	}
	evict := func(name string) error {
		return kube.PolicyV1().Evictions("certapi-system").Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "certapi-system"}})
	}
	if err := evict(pods.Items[0].Name); err != nil {
		t.Fatalf("evicting %s: %v", pods.Items[0].Name, err)
	}
	if err := evict(pods.Items[1].Name); !apierrors.IsTooManyRequests(err) {
		t.Errorf("a second eviction at once: %v; want 429 from the PodDisruptionBudget", err)
	}
	nodetest.Kubectl(t, cp, "-n", "certapi-system", "rollout", "status", "deployment/certapi", "--timeout=5m")
	l.Check(t, "an eviction")
	l.Stop()

	ca, err = certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ca.Status.Certificates) != 1 || ca.Status.Active.SubjectKeyID != firstCA {
		t.Errorf("the CA changed through the disruptions: %+v", ca.Status.Certificates)
	}
}
