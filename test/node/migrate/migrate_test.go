// Package migrate moves an install of the single embedded etcd member (the chart with
// examples/values-single.yaml) to the chart's default, three replicas whose members form one etcd cluster,
// as docs/backup-and-restore.md says, on a control plane with a real node of its own (the release takes
// the names every other node package's install takes).
package migrate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/certapi/certapi/pkg/snapshot"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

const (
	ns = "certapi-system"
	// selector selects certapi's pods, the Deployment's and the StatefulSet's.
	selector = "app.kubernetes.io/name=certapi,app.kubernetes.io/component=apiserver"
	// restoreDoc is the page whose blocks TestEmbeddedToCluster runs.
	restoreDoc = "docs/backup-and-restore.md"
)

var cp *framework.ControlPlane

// TestMain starts the cluster with its node and no image of certapi's: the README's cluster-image block
// loads the release's image.
func TestMain(m *testing.M) {
	os.Exit(nodetest.Run(m, "certapi-node-migrate-", func(context.Context, string) (map[string]string, error) {
		return nil, nil
	}, func(c *framework.ControlPlane, _ map[string]string) { cp = c }))
}

// singleInstall is the README's cluster install with examples/values-single.yaml (%s: its path): one
// replica in a Deployment, the single embedded member on the claim certapi-data.
const singleInstall = `cat > encryption-config.yaml <<EOF
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [certificateauthoritykeys.certapi.dev]
  providers:
  - secretbox: {keys: [{name: key1, secret: $(head -c 32 /dev/urandom | base64)}]}
EOF
kubectl create namespace certapi-system
kubectl -n certapi-system create secret generic certapi-encryption-config --from-file=config.yaml=encryption-config.yaml
helm install certapi _output/release/certapi-*.tgz -n certapi-system -f %s
kubectl certapi check --wait --timeout=5m
`

// naiveUpgrade is what a user might try first: the release switched to the cluster in place.
const naiveUpgrade = `helm upgrade certapi _output/release/certapi-*.tgz -n certapi-system --reuse-values --set etcd.mode=cluster --set replicas=3`

// TestEmbeddedToCluster installs the release's chart with examples/values-single.yaml, delivers a request
// into a Secret and injects a webhook configuration; checks that `helm upgrade --set etcd.mode=cluster`
// alone is refused, with a message that names the way, and changes nothing; restores the single member in
// place with docs/backup-and-restore.md's single-restore block (singleRestore); then runs its "From one
// embedded member to a cluster" as written (embedded-to-cluster-save, whose integrity record the
// embedded-to-cluster-restore block must verify). After it: three members, certapi-0 restarted
// on the restored data and the others joined; the Deployment gone; the CA of before, the request kept, a
// new request delivered, and the Secret and webhook configuration of before not written since (not
// re-issued, not re-injected), the certificate verifying against the injected bundle. Then back to one
// replica: `--set replicas=1` refused, and the page's "To one replica" (cluster-save, cluster-restore-stop,
// cluster-restore with --set replicas=1 added): the same checks of one pod, and a request made after the
// snapshot gone. Last, docs/install.md's openshift-ids and host-network installs (otherInstalls).
func TestEmbeddedToCluster(t *testing.T) {
	ctx := context.Background()
	kube, _ := nodetest.Clients(t, cp)
	nodetest.LogPodsOnFailure(t, cp, ns, 3)
	// The single member's claim, the first member's, two for the members that join, one spare.
	for i := range 5 {
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("certapi-data-%d", i), "1Gi"); err != nil {
			t.Fatal(err)
		}
	}
	shell := nodetest.NewDocShell(t, cp)
	shell.Run(t, "README.md", 10*time.Minute, "cluster-image")
	shell.Script(t, "the install with examples/values-single.yaml", 10*time.Minute,
		fmt.Sprintf(singleInstall, nodetest.RepoPath(t, "artifacts/charts/examples/values-single.yaml")))
	nodetest.EnforceRestricted(t, cp, ns)
	kept := nodetest.KeepForRestore(t, cp)

	out, err := shell.ScriptErr(2*time.Minute, naiveUpgrade)
	if err == nil || !strings.Contains(out, "holds the data of etcd.mode embedded") || !strings.Contains(out, "From one embedded member to a cluster") {
		t.Fatalf("%s: %v\n%s\nwant it refused with a message that names the claim's data and the way", naiveUpgrade, err, out)
	}
	if _, err := kube.AppsV1().StatefulSets(ns).Get(ctx, "certapi", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the StatefulSet after the refused upgrade: %v; want none", err)
	}
	if ok, state := nodetest.PodsReady(ctx, kube, ns, selector, 1); !ok {
		t.Errorf("certapi after the refused upgrade: %s; want its one pod Ready", state)
	}

	singleRestore(t, shell, kept)

	nodetest.KeepEarlierSnapshot(t, shell)
	start := time.Now()
	shell.Run(t, restoreDoc, 10*time.Minute, "embedded-to-cluster-save")
	if _, err := snapshot.Verify(filepath.Join(shell.Dir, "certapi.db")); err != nil {
		t.Fatalf("the snapshot of the embedded-to-cluster-save block: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(shell.Dir, "certapi.db"+snapshot.IntegritySuffix)); err != nil || fi.Size() == 0 {
		t.Fatalf("the embedded-to-cluster-save block kept no integrity record beside the snapshot: %v", err)
	}
	if out := shell.Run(t, restoreDoc, 10*time.Minute, "embedded-to-cluster-restore"); !strings.Contains(out, "Integrity verified") {
		t.Errorf("the embedded-to-cluster-restore block did not verify the snapshot against the integrity record the save kept:\n%s", out)
	}
	nodetest.WaitFor(t, 10*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	t.Logf("figure: the single embedded member moved to a cluster of three (snapshot, stop, the restore Pod, helm upgrade) to three pods Ready and the APIService Available: %s",
		time.Since(start).Round(time.Second))
	nodetest.Logged(t, cp, ns, "certapi-0", `action="Restart"`, "Etcd member is ready")
	for _, pod := range []string{"certapi-1", "certapi-2"} {
		nodetest.Logged(t, cp, ns, pod, `action="Join"`, "Added this member as an etcd learner", "Promoted this etcd learner to a voting member")
	}
	if _, err := kube.AppsV1().Deployments(ns).Get(ctx, "certapi", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Deployment of the single member after the move: %v; want it gone", err)
	}
	kept.Restored(t, []string{"kept", "after-single"}, "", "after")

	// And back to one replica: refused as a scale-down, then a restore into a one-member cluster.
	out, err = shell.ScriptErr(2*time.Minute, scaleToOne)
	if err == nil || !strings.Contains(out, `"To one replica"`) {
		t.Fatalf("%s: %v\n%s\nwant it refused with a message that names the way", scaleToOne, err, out)
	}
	nodetest.KeepEarlierSnapshot(t, shell)
	shell.Run(t, restoreDoc, time.Minute, "cluster-save")
	kept.Deliver(t, "lost")
	shell.Run(t, restoreDoc, 6*time.Minute, "cluster-restore-stop")
	restore := nodetest.Block(t, restoreDoc, "cluster-restore")
	toOne := strings.Replace(restore, "--set etcd.cluster.epoch=$EPOCH", "--set etcd.cluster.epoch=$EPOCH --set replicas=1", 1)
	if toOne == restore {
		t.Fatalf("%s's cluster-restore block has no `--set etcd.cluster.epoch=$EPOCH` to add `--set replicas=1` to, as \"To one replica\" says:\n%s", restoreDoc, restore)
	}
	start = time.Now()
	shell.Script(t, "the cluster-restore block with --set replicas=1", 10*time.Minute, toOne)
	nodetest.WaitFor(t, 5*time.Minute, "one certapi pod Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 1)
	})
	t.Logf("figure: the cluster of three restored into one member (the restore Pod, helm upgrade, check --wait) to its pod Ready: %s", time.Since(start).Round(time.Second))
	nodetest.Logged(t, cp, ns, "certapi-0", `action="Restart"`, "Etcd member is ready")
	if sts, err := kube.AppsV1().StatefulSets(ns).Get(ctx, "certapi", metav1.GetOptions{}); err != nil || sts.Spec.Replicas == nil || *sts.Spec.Replicas != 1 ||
		sts.Annotations["certapi.dev/etcd-cluster-epoch"] != "2" {
		t.Errorf("the StatefulSet after the restore into one member: %v; want 1 replica and epoch 2", err)
	}
	kept.Restored(t, []string{"kept", "after"}, "lost", "after-one")

	otherInstalls(t, shell)
}

// singleRestore runs docs/backup-and-restore.md's Restore of the single embedded member: a copy saved with
// the cluster-save block; a request made after it; step 1 (the Deployment scaled to zero); the
// single-restore block as written, onto the member's claim, which still holds its data (the block's
// --force moves it aside); step 3 (scaled back to one). After it: the CAs of before, the request made after
// the snapshot gone, a new one delivered, and the Secret and webhook configuration of before untouched.
func singleRestore(t *testing.T, shell *nodetest.DocShell, kept *nodetest.Kept) {
	t.Helper()
	kube, _ := nodetest.Clients(t, cp)
	start := time.Now()
	shell.Run(t, restoreDoc, time.Minute, "cluster-save")
	kept.Deliver(t, "lost-single")
	shell.Script(t, "step 1 of Restore", 5*time.Minute, `kubectl -n certapi-system scale deploy/certapi --replicas=0
kubectl -n certapi-system wait --for=delete pod --timeout=5m --selector=`+selector)
	out := shell.Run(t, restoreDoc, 5*time.Minute, "single-restore")
	if !strings.Contains(out, "Restored ") {
		t.Errorf("the single-restore block's output says nothing restored:\n%s", out)
	}
	shell.Script(t, "step 3 of Restore", 5*time.Minute, `kubectl -n certapi-system scale deploy/certapi --replicas=1
kubectl certapi check --wait --timeout=5m`)
	nodetest.WaitFor(t, 5*time.Minute, "one certapi pod Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 1)
	})
	t.Logf("figure: the single member restored in place (cluster-save, a request, scaled to zero, the single-restore block, scaled to one) to its pod Ready: %s",
		time.Since(start).Round(time.Second))
	kept.Restored(t, []string{"kept"}, "lost-single", "after-single")
}

// sccUID is the user and fsGroup that openshiftSCC assigns, from the kind of range OpenShift gives a
// namespace: not the image's 65532.
const sccUID = 1000680000

// openshiftSCC stands in for OpenShift's restricted-v2 SCC, which the node here does not have: a pod of
// certapi's namespace created with no runAsUser gets a user and an fsGroup of the namespace's range, as
// the SCC's MustRunAsRange and MustRunAs assign them. Pod Security restricted still judges the result.
const openshiftSCC = `apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata:
  name: test-openshift-restricted-v2
spec:
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}
  matchConditions:
  - name: ids-left-to-the-platform
    expression: "!has(object.spec.securityContext) || !has(object.spec.securityContext.runAsUser)"
  failurePolicy: Fail
  reinvocationPolicy: Never
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{spec: Object.spec{securityContext: Object.spec.securityContext{runAsUser: 1000680000, fsGroup: 1000680000}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata:
  name: test-openshift-restricted-v2
spec:
  policyName: test-openshift-restricted-v2
  matchResources:
    namespaceSelector:
      matchLabels: {kubernetes.io/metadata.name: certapi-system}
`

// otherInstalls runs docs/install.md's other installs of the release's chart as written, each on a clean
// namespace (helm uninstall, the claims and the peer CA Secret deleted, as docs/operating.md says for a
// fresh start; the namespace and the encryption Secret kept, "install as above"). openshift-ids, the IDs
// left to the platform: with openshiftSCC assigning them, as OpenShift would, and the node's volumes
// opened to any user (hostPath takes no fsGroup, which OpenShift's storage applies), three pods Ready
// running as sccUID under Pod Security restricted. Then host-network, on the node's network with
// securePort 10443: one node has room for one replica (the scheduler counts host ports), which
// bootstraps, serves and makes the APIService Available through the node's address.
func otherInstalls(t *testing.T, shell *nodetest.DocShell) {
	t.Helper()
	ctx := context.Background()
	kube, _ := nodetest.Clients(t, cp)

	start := time.Now()
	uninstall(t, shell)
	newVolumes(t, "openshift", true)
	scc := filepath.Join(t.TempDir(), "scc.yaml")
	if err := os.WriteFile(scc, []byte(openshiftSCC), 0o644); err != nil {
		t.Fatal(err)
	}
	nodetest.Kubectl(t, cp, "apply", "-f", scc)
	waitSCCAssigns(t, kube)
	nodetest.EnforceRestricted(t, cp, ns)
	shell.Run(t, "docs/install.md", 5*time.Minute, "openshift-ids")
	shell.Script(t, "the check after the install", 6*time.Minute, "kubectl certapi check --wait --timeout=5m")
	nodetest.WaitFor(t, 5*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	sts, err := kube.AppsV1().StatefulSets(ns).Get(ctx, "certapi", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sc := sts.Spec.Template.Spec.SecurityContext; sc == nil || sc.RunAsUser != nil || sc.RunAsGroup != nil || sc.FSGroup != nil {
		t.Errorf("the openshift-ids install's pod template has the security context %+v; want no runAsUser, runAsGroup or fsGroup", sc)
	}
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if sc := p.Spec.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != sccUID {
			t.Errorf("pod %s of the openshift-ids install runs with %+v; want the user the stand-in SCC assigned, %d", p.Name, sc, sccUID)
		}
	}
	nodetest.Kubectl(t, cp, "delete", "-f", scc)
	t.Logf("figure: docs/install.md's openshift-ids install (after an uninstall) to three pods Ready: %s", time.Since(start).Round(time.Second))

	start = time.Now()
	uninstall(t, shell)
	newVolumes(t, "hostnetwork", false)
	shell.Run(t, "docs/install.md", 5*time.Minute, "host-network")
	shell.Script(t, "the check after the install", 6*time.Minute, "kubectl certapi check --wait --timeout=5m")
	pod, err := kube.CoreV1().Pods(ns).Get(ctx, "certapi-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !pod.Spec.HostNetwork || pod.Status.PodIP != pod.Status.HostIP {
		t.Errorf("certapi-0 of the host-network install: hostNetwork %v, pod IP %s, host IP %s; want it on the node's network", pod.Spec.HostNetwork, pod.Status.PodIP, pod.Status.HostIP)
	}
	t.Logf("figure: docs/install.md's host-network install (after an uninstall) to the check passing: %s", time.Since(start).Round(time.Second))
	uninstall(t, shell)
}

// waitSCCAssigns waits until openshiftSCC assigns its user to a pod created in ns (a server-side dry run):
// kube-apiserver applies a new policy and binding once its informers have them, and a pod created before
// that runs as the image's user, to whom the encryption Secret's files are not readable.
func waitSCCAssigns(t *testing.T, kube kubernetes.Interface) {
	t.Helper()
	// Restricted in all but the user, which the policy is to assign: the namespace may enforce Pod Security
	// restricted already.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "scc-probe-"},
		Spec: corev1.PodSpec{
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{Name: "probe", Image: "probe", SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			}}},
		},
	}
	nodetest.WaitFor(t, time.Minute, "the stand-in SCC to assign its user to a new pod", func(ctx context.Context) (bool, string) {
		got, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err.Error()
		}
		if sc := got.Spec.SecurityContext; sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != sccUID {
			return false, fmt.Sprintf("a pod created now gets the security context %+v", sc)
		}
		return true, ""
	})
}

// newVolumes makes three volumes for the members' claims, named after what they are for, and with open,
// every available volume's directory is made writable by any user, as a volume OpenShift applies a pod's
// fsGroup to is to that pod.
func newVolumes(t *testing.T, what string, open bool) {
	t.Helper()
	ctx := context.Background()
	for i := range 3 {
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("certapi-%s-%d", what, i), "1Gi"); err != nil {
			t.Fatal(err)
		}
	}
	if !open {
		return
	}
	kube, _ := nodetest.Clients(t, cp)
	pvs, err := kube.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pv := range pvs.Items {
		if pv.Spec.ClaimRef == nil && pv.Spec.HostPath != nil {
			if err := os.Chmod(pv.Spec.HostPath.Path, 0o777); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// uninstall removes the release and what docs/operating.md says to delete by hand to start afresh: the
// claims and the peer CA Secret; the namespace and the encryption Secret stay, for the next install.
func uninstall(t *testing.T, shell *nodetest.DocShell) {
	t.Helper()
	shell.Script(t, "helm uninstall and a fresh start", 5*time.Minute, `helm uninstall certapi -n certapi-system --wait --timeout=3m
kubectl -n certapi-system delete pvc --all --wait=true --timeout=2m
kubectl -n certapi-system delete secret certapi-etcd-peer-ca --ignore-not-found`)
}

// scaleToOne is a running cluster scaled down to one member, which the chart refuses.
const scaleToOne = `helm upgrade certapi _output/release/certapi-*.tgz -n certapi-system --reuse-values --set replicas=1`
