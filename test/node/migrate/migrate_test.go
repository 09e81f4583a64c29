// Package migrate moves an install of the single embedded etcd member (the chart with
// examples/values-single.yaml) to the chart's default, three replicas whose members form one etcd cluster,
// as docs/backup-and-restore.md says, on a control plane with a real node of its own (the release takes
// the names every other node package's install takes).
package migrate

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// alone is refused, with a message that names the way, and changes nothing; then runs
// docs/backup-and-restore.md's "From one embedded member to a cluster" as written
// (embedded-to-cluster-save, embedded-to-cluster-restore). After it: three members, certapi-0 restarted
// on the restored data and the others joined; the Deployment gone; the CA of before, the request kept, a
// new request delivered, and the Secret and webhook configuration of before not written since (not
// re-issued, not re-injected), the certificate verifying against the injected bundle. Then back to one
// replica: `--set replicas=1` refused, and the page's "To one replica" (cluster-save, cluster-restore-stop,
// cluster-restore with --set replicas=1 added): the same checks of one pod, and a request made after the
// snapshot gone.
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

	start := time.Now()
	shell.Run(t, restoreDoc, 10*time.Minute, "embedded-to-cluster-save", "embedded-to-cluster-restore")
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
	kept.Restored(t, []string{"kept"}, "", "after")

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
}

// scaleToOne is a running cluster scaled down to one member, which the chart refuses.
const scaleToOne = `helm upgrade certapi _output/release/certapi-*.tgz -n certapi-system --reuse-values --set replicas=1`
