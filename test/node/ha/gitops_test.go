package ha

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

// gitopsNamespace is the chart's namespace in the GitOps test (the release's names are the ones every
// other install of this package takes: it cleans up before TestHAOverlay runs).
const gitopsNamespace = "certapi-system"

// refusal is what the first member of a new cluster logs when it refuses to bootstrap one beside a CA
// certapi published (etcdcluster.DecideStart, rule 4).
const refusal = "refusing to bootstrap a new, empty etcd cluster"

// TestGitOpsEmbeddedToClusterRefused is a GitOps install (Argo CD, Flux: `helm template`, then `kubectl
// apply`; Helm's lookup runs in neither) switched from the single embedded member (examples/values-single.yaml)
// to the cluster by rendering the chart with etcd.mode=cluster and applying it over the running install.
// The chart's lookup guard cannot see the single member's data there; certapi's own must: the StatefulSet's
// first member finds the CA bundle the single member published in the APIService and refuses to
// bootstrap a new, empty cluster, saying how to move the data; no second CA is made (the CA and the
// APIService's bundle stay those of before, the peer CA Secret records no bootstrap).
func TestGitOpsEmbeddedToClusterRefused(t *testing.T) {
	ctx := context.Background()
	kube, certapi := nodetest.Clients(t, cp)
	nodetest.LogPodsOnFailure(t, cp, gitopsNamespace, 1)
	dir := t.TempDir()
	// The chart as a GitOps tool renders it (no cluster access, the test hook left out), with the image
	// imported on the node.
	i := strings.LastIndex(images["certapi"], ":")
	repository, tag := images["certapi"][:i], images["certapi"][i+1:]
	render := func(name string, set ...string) string {
		t.Helper()
		args := []string{"template", "certapi", nodetest.RepoPath(t, "artifacts/charts/certapi"), "--namespace", gitopsNamespace, "--skip-tests",
			"-f", nodetest.RepoPath(t, "artifacts/charts/examples/values-single.yaml"),
			"--set", "image.repository=" + repository, "--set", "image.tag=" + tag, "--set", "image.pullPolicy=Never"}
		for _, s := range set {
			args = append(args, "--set", s)
		}
		out := helmOut(t, dir, args...)
		file := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return file
	}
	single := render("single")
	cluster := render("cluster", "etcd.mode=cluster", "replicas=3")
	t.Cleanup(func() { cleanUpGitOps(t, single, cluster) })

	nodetest.Kubectl(t, cp, "create", "namespace", gitopsNamespace)
	if err := cp.CreateEncryptionConfigSecret(ctx); err != nil {
		t.Fatal(err)
	}
	// The single member's claim, and one for each member of the cluster.
	for i := range 4 {
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("gitops-data-%d", i), "1Gi"); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	nodetest.Kubectl(t, cp, "apply", "-f", single)
	nodetest.Kubectl(t, cp, "-n", gitopsNamespace, "rollout", "status", "deployment/certapi", "--timeout=5m")
	nodetest.Kubectl(t, cp, "wait", "--for=condition=Available", "apiservice/"+certapiv1alpha1.APIServiceName, "--timeout=2m")
	t.Logf("figure: helm template | kubectl apply of the single embedded member to the APIService Available: %s", time.Since(start).Round(time.Second))
	agg, err := aggregatorclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	var before certapiv1alpha1.CertificateAuthorityStatus
	var bundle []byte
	nodetest.WaitFor(t, 2*time.Minute, "the single member's CA, injected into its APIService", func(ctx context.Context) (bool, string) {
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		svc, err := agg.ApiregistrationV1().APIServices().Get(ctx, certapiv1alpha1.APIServiceName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		before, bundle = ca.Status, svc.Spec.CABundle
		return ca.Status.Active != nil && len(bundle) > 0 && string(bundle) == ca.Status.CABundle, fmt.Sprintf("CA %+v, APIService caBundle of %d bytes", ca.Status.Active, len(bundle))
	})

	// The switch, as a GitOps sync applies it: no lookup, no refusal from the chart.
	start = time.Now()
	nodetest.Kubectl(t, cp, "apply", "-f", cluster)
	var logs string
	nodetest.WaitFor(t, 5*time.Minute, "certapi-0 to refuse to bootstrap, or to bootstrap", func(ctx context.Context) (bool, string) {
		logs = podLogs(cp, "certapi-0")
		return strings.Contains(logs, refusal) || strings.Contains(logs, `action="Bootstrap"`), "certapi-0 has logged neither"
	})
	if strings.Contains(logs, `action="Bootstrap"`) {
		t.Fatalf("certapi-0 bootstrapped a new, empty etcd cluster beside the single member's data (a second CA follows):\n%s", logs)
	}
	t.Logf("figure: the cluster rendering applied to certapi-0's refusal: %s", time.Since(start).Round(time.Second))
	for _, want := range []string{refusal, "APIService " + certapiv1alpha1.APIServiceName, "From one embedded member to a cluster"} {
		if !strings.Contains(logs, want) {
			t.Errorf("certapi-0's refusal does not say %q:\n%s", want, logs)
		}
	}
	// It keeps refusing: kubelet restarts it, and it refuses again.
	nodetest.WaitFor(t, 5*time.Minute, "certapi-0 restarted after its refusal and refusing again", func(ctx context.Context) (bool, string) {
		pod, err := kube.CoreV1().Pods(gitopsNamespace).Get(ctx, "certapi-0", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		restarts := int32(0)
		for _, cs := range pod.Status.ContainerStatuses {
			restarts += cs.RestartCount
		}
		prev, _ := nodetest.KubectlErr(cp, "-n", gitopsNamespace, "logs", "--previous", "certapi-0")
		return restarts >= 1 && strings.Contains(prev, refusal), fmt.Sprintf("%d restarts", restarts)
	})

	// No second CA: the single member still serves the CA of before, and the APIService the same bundle.
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nodetest.CACertificates(ca) != nodetest.CACertificates(&certapiv1alpha1.CertificateAuthority{Status: before}) || ca.Status.CABundle != before.CABundle {
		t.Errorf("the CA after the refused switch: %+v; want the one of before, %+v", ca.Status.Certificates, before.Certificates)
	}
	svc, err := agg.ApiregistrationV1().APIServices().Get(ctx, certapiv1alpha1.APIServiceName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(svc.Spec.CABundle, bundle) {
		t.Errorf("the APIService's caBundle changed after the refused switch: a second CA was published")
	}
	sec, err := kube.CoreV1().Secrets(gitopsNamespace).Get(ctx, incluster.DefaultSecretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		t.Fatal(err)
	case sec.Annotations[incluster.AnnotationBootstrapped] != "":
		t.Errorf("the peer CA Secret records a bootstrap: %s", sec.Annotations[incluster.AnnotationBootstrapped])
	}
	// The other members (the StatefulSet starts its pods in parallel) wait for a cluster that never comes.
	for _, pod := range []string{"certapi-0", "certapi-1", "certapi-2"} {
		if logs := podLogs(cp, pod); strings.Contains(logs, "Etcd member is ready") {
			t.Errorf("%s started an etcd member after certapi-0's refusal", pod)
		}
	}
}

// podLogs is the log of pod's current container and of the one before it, if any.
func podLogs(cp *framework.ControlPlane, pod string) string {
	prev, _ := nodetest.KubectlErr(cp, "-n", gitopsNamespace, "logs", "--previous", pod)
	cur, _ := nodetest.KubectlErr(cp, "-n", gitopsNamespace, "logs", pod)
	return prev + cur
}

// helmOut runs helm with its state under dir and returns its standard output.
func helmOut(t *testing.T, dir string, args ...string) string {
	t.Helper()
	bin, err := framework.HelmBinary()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+cp.Kubeconfig, "HELM_CACHE_HOME="+dir+"/cache", "HELM_CONFIG_HOME="+dir+"/config", "HELM_DATA_HOME="+dir+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// cleanUpGitOps removes what the GitOps test made, so that the package's other tests install on a clean
// cluster: both renderings' objects, the namespace (its claims with it), the ClusterTrustBundle certapi
// published, and the test's volumes.
func cleanUpGitOps(t *testing.T, files ...string) {
	for _, f := range files {
		if out, err := nodetest.KubectlErr(cp, "delete", "--ignore-not-found", "--wait=false", "-f", f); err != nil {
			t.Errorf("cleaning up: kubectl delete -f %s: %v\n%s", f, err, out)
		}
	}
	for _, args := range [][]string{
		{"delete", "--ignore-not-found", "namespace", gitopsNamespace, "--timeout=5m"},
		{"delete", "--ignore-not-found", "clustertrustbundle", certapiv1alpha1.ClusterTrustBundleName},
		{"delete", "--ignore-not-found", "pv", "gitops-data-0", "gitops-data-1", "gitops-data-2", "gitops-data-3"},
	} {
		if out, err := nodetest.KubectlErr(cp, args...); err != nil {
			t.Errorf("cleaning up: kubectl %v: %v\n%s", args, err, out)
		}
	}
}
