package etcdcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/pkg/snapshot"
	"github.com/certapi/certapi/test/node/nodetest"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestClusterRestore runs docs/backup-and-restore.md's "Several members" on the README's install, its
// blocks as they are written (cluster-save, cluster-restore-stop, cluster-restore), twice. First
// certapi-0's volume is lost and the other two keep the data of before: a request delivered into a Secret
// and a webhook configuration injected; the snapshot streamed out of certapi-0's pod; a request made after
// it; certapi scaled to zero; certapi-0's claim deleted and made anew; the restore Pod fed the snapshot on
// stdin, with the next epoch, 1; helm upgrade with it. certapi-1 and certapi-2 must move their data aside
// and join. Then every pod and every volume is lost: a new snapshot, a later request, scaled to zero, the
// three claims deleted and certapi-0's made anew, the same blocks (epoch 2); certapi-1 and certapi-2 start
// on new, empty claims and join. After each: the CA is the one before, the request made after the
// snapshot is gone, a new request is delivered, and the Secret and the webhook configuration of before
// are untouched (not re-issued, not re-injected), the certificate still verifying against the injected
// bundle.
func TestClusterRestore(t *testing.T) {
	ctx := context.Background()
	kube, certapi, before := installed3(t)

	const reqNS = "restore"
	nodetest.Kubectl(t, cp, "create", "namespace", reqNS)
	t.Cleanup(func() {
		_, _ = nodetest.KubectlErr(cp, "delete", "namespace", reqNS, "--ignore-not-found", "--wait=false")
	})
	request := func(name string) {
		t.Helper()
		nodetest.Kubectl(t, cp, "create", "servingcertrequest", name, "-n", reqNS, "--service="+name, "--secret="+name+"-tls")
		nodetest.WaitFor(t, 2*time.Minute, "the Secret of request "+name, func(ctx context.Context) (bool, string) {
			s, err := kube.CoreV1().Secrets(reqNS).Get(ctx, name+"-tls", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			return len(s.Data["tls.crt"]) > 0, "no tls.crt"
		})
	}
	request("kept")
	hook := filepath.Join(t.TempDir(), "webhook.yaml")
	if err := os.WriteFile(hook, []byte(restoreWebhook), 0o644); err != nil {
		t.Fatal(err)
	}
	nodetest.Kubectl(t, cp, "apply", "-f", hook)
	t.Cleanup(func() {
		_, _ = nodetest.KubectlErr(cp, "delete", "validatingwebhookconfiguration", "restore-webhook", "--ignore-not-found")
	})
	injected := func() *admissionregistrationv1.ValidatingWebhookConfiguration {
		t.Helper()
		var vwc *admissionregistrationv1.ValidatingWebhookConfiguration
		nodetest.WaitFor(t, 2*time.Minute, "restore-webhook's caBundle to be certapi's bundle", func(ctx context.Context) (bool, string) {
			ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if vwc, err = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "restore-webhook", metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
			got := string(vwc.Webhooks[0].ClientConfig.CABundle)
			return got != "" && got == ca.Status.CABundle, fmt.Sprintf("caBundle %d bytes, the CA's %d", len(got), len(ca.Status.CABundle))
		})
		return vwc
	}
	vwcBefore := injected()
	secretBefore, err := kube.CoreV1().Secrets(reqNS).Get(ctx, "kept-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// restored checks what a restore must leave: the CAs of before, the requests made before the snapshot
	// kept and the one made after it gone, a new request delivered, and the Secret and the webhook
	// configuration of before not written since.
	restored := func(kept []string, lost, after string) {
		t.Helper()
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
		if err != nil || caCertificates(ca) != before {
			t.Errorf("the CAs after the restore: %v: %s; want those of before, %s", err, caCertificates(ca), before)
		}
		if _, err := certapi.CertapiV1alpha1().ServingCertRequests(reqNS).Get(ctx, lost, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the request %s made after the snapshot: %v; want it gone with the restore", lost, err)
		}
		for _, name := range kept {
			if _, err := certapi.CertapiV1alpha1().ServingCertRequests(reqNS).Get(ctx, name, metav1.GetOptions{}); err != nil {
				t.Errorf("the request %s made before the snapshot: %v", name, err)
			}
		}
		// A request made now is delivered and the webhook configuration holds the bundle: the restored
		// leader signs and injects, and its queues, first in first out, have seen what was there before.
		request(after)
		vwcAfter := injected()
		if vwcAfter.ResourceVersion != vwcBefore.ResourceVersion {
			t.Errorf("restore-webhook was written after the restore (resourceVersion %s, before %s): re-injected", vwcAfter.ResourceVersion, vwcBefore.ResourceVersion)
		}
		secretAfter, err := kube.CoreV1().Secrets(reqNS).Get(ctx, "kept-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if secretAfter.ResourceVersion != secretBefore.ResourceVersion || !bytes.Equal(secretAfter.Data["tls.crt"], secretBefore.Data["tls.crt"]) {
			t.Errorf("the Secret of the request made before the snapshot was written after the restore (resourceVersion %s, before %s): re-issued",
				secretAfter.ResourceVersion, secretBefore.ResourceVersion)
		}
		if err := testhelpers.VerifyServingSecret(secretAfter, vwcAfter.Webhooks[0].ClientConfig.CABundle, "kept", reqNS); err != nil {
			t.Errorf("the certificate of before does not verify against the bundle injected after the restore: %v", err)
		}
	}

	shell := nodetest.NewDocShell(t, cp)
	t.Log("certapi-0's volume lost, certapi-1 and certapi-2 keep the data of before")
	save(t, shell)
	request("lost-1")
	start := time.Now()
	restoreCluster(t, kube, shell, "data-certapi-0")
	t.Logf("figure: a three-member cluster restored (scaled to zero, certapi-0's claim made anew, the restore Pod, helm upgrade) to three pods Ready and the APIService Available: %s",
		time.Since(start).Round(time.Second))
	nodetest.Logged(t, cp, ns, "certapi-0", `action="Restart"`, "Etcd member is ready")
	for _, pod := range []string{"certapi-1", "certapi-2"} {
		nodetest.Logged(t, cp, ns, pod, `action="DiscardStale"`, "Moved the data of an earlier cluster epoch aside", "Promoted this etcd learner to a voting member")
	}
	restored([]string{"kept"}, "lost-1", "after-1")

	t.Log("every pod and every volume lost")
	save(t, shell)
	request("lost-2")
	start = time.Now()
	restoreCluster(t, kube, shell, "data-certapi-0", "data-certapi-1", "data-certapi-2")
	t.Logf("figure: a three-member cluster restored with every volume lost (scaled to zero, three claims deleted, certapi-0's made anew, the restore Pod, helm upgrade) to three pods Ready and the APIService Available: %s",
		time.Since(start).Round(time.Second))
	nodetest.Logged(t, cp, ns, "certapi-0", `action="Restart"`, "Etcd member is ready")
	for _, pod := range []string{"certapi-1", "certapi-2"} {
		nodetest.Logged(t, cp, ns, pod, `action="Join"`, "Added this member as an etcd learner", "Promoted this etcd learner to a voting member")
	}
	restored([]string{"kept", "after-1"}, "lost-2", "after-2")
	if ann := strings.TrimSpace(nodetest.Kubectl(t, cp, "-n", ns, "get", "statefulset", "certapi", "-o", `jsonpath={.metadata.annotations.certapi\.dev/etcd-cluster-epoch}`)); ann != "2" {
		t.Errorf("the StatefulSet's cluster epoch after two restores: %q; want 2", ann)
	}
}

// save runs docs/backup-and-restore.md's cluster-save block in shell: the snapshot streamed out of a
// member's pod into certapi.db, and checked.
func save(t *testing.T, shell *nodetest.DocShell) {
	t.Helper()
	start := time.Now()
	shell.Run(t, restoreDoc, time.Minute, "cluster-save")
	took := time.Since(start)
	info, err := snapshot.Verify(filepath.Join(shell.Dir, "certapi.db"))
	if err != nil {
		t.Fatalf("the snapshot the cluster-save block streamed out: %v", err)
	}
	t.Logf("figure: the cluster-save block (kubectl exec certapi-0 -- certapi snapshot save -, then snapshot status): %d bytes, %d keys, in %s",
		info.Size, info.Keys, took.Round(time.Millisecond))
}

// restoreDoc is the page whose blocks TestClusterRestore runs.
const restoreDoc = "docs/backup-and-restore.md"

// restoreCluster runs docs/backup-and-restore.md's "Several members" in shell: the cluster-restore-stop
// block, then the claims lost deleted (each gets a new volume, as kind's storage provisioner would make
// it) and certapi-0's made anew if it was one of them, as step 2 says, then the cluster-restore block; it
// returns once three pods are Ready and the APIService Available.
func restoreCluster(t *testing.T, kube kubernetes.Interface, shell *nodetest.DocShell, lost ...string) {
	t.Helper()
	ctx := context.Background()
	shell.Run(t, restoreDoc, 6*time.Minute, "cluster-restore-stop")
	for _, claim := range lost {
		nodetest.Kubectl(t, cp, "-n", ns, "delete", "pvc", claim, "--wait=true", "--timeout=2m")
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("certapi-%s-%d", claim, time.Now().UnixNano()), "1Gi"); err != nil {
			t.Fatal(err)
		}
	}
	if slices.Contains(lost, "data-certapi-0") {
		claim := filepath.Join(t.TempDir(), "claim.yaml")
		if err := os.WriteFile(claim, []byte(restoreClaim), 0o644); err != nil {
			t.Fatal(err)
		}
		nodetest.Kubectl(t, cp, "-n", ns, "apply", "-f", claim)
	}
	out := shell.Run(t, restoreDoc, 10*time.Minute, "cluster-restore")
	if !strings.Contains(out, "--etcd-cluster-epoch=") {
		t.Errorf("the restore's output does not say which --etcd-cluster-epoch to start the members with:\n%s", out)
	}
	nodetest.WaitFor(t, 10*time.Minute, "three certapi pods Ready", func(ctx context.Context) (bool, string) {
		return nodetest.PodsReady(ctx, kube, ns, selector, 3)
	})
	nodetest.Kubectl(t, cp, "wait", "--for=condition=Available", "apiservice/v1alpha1.certapi.dev", "--timeout=2m")
}

// restoreWebhook is a webhook configuration that opts into injection; failurePolicy Ignore and a resource
// nobody has: it is never called.
const restoreWebhook = `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: restore-webhook
  annotations:
    certapi.dev/inject-ca-bundle: "true"
webhooks:
- name: restore-webhook.restore.svc
  clientConfig:
    service: {namespace: restore, name: kept, path: /validate}
  rules:
  - {apiGroups: [example.com], apiVersions: [v1], resources: [gadgets], operations: [CREATE]}
  failurePolicy: Ignore
  sideEffects: None
  admissionReviewVersions: [v1]
`

// restoreClaim is certapi-0's claim made anew, as the StatefulSet's volumeClaimTemplates would make it.
const restoreClaim = `apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data-certapi-0
  labels:
    app.kubernetes.io/name: certapi
    app.kubernetes.io/component: apiserver
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests:
      storage: 1Gi
`
