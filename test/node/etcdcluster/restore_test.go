package etcdcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// TestClusterRestore is docs/backup-and-restore.md's "Several members" on the README's install, as
// written, twice. First certapi-0's volume is lost and the other two keep the data of before: a request
// delivered into a Secret and a webhook configuration injected; a snapshot streamed out of a member's pod
// (`kubectl exec certapi-1 -- certapi snapshot save -`); a request made after it; certapi scaled to zero,
// certapi-0's claim deleted and made anew; the snapshot restored into it by a one-off Pod of certapi's
// image fed on stdin (`kubectl run -i`) with --cluster-epoch=1; helm upgrade with etcd.cluster.epoch=1 and
// three replicas. certapi-1 and certapi-2 must move their data aside and join. Then every pod and every
// volume is lost (item 4 of the issue this answers): a new snapshot out of certapi-2, a later request,
// scaled to zero, the three claims deleted, the snapshot restored into certapi-0's new claim with
// --cluster-epoch=2; certapi-1 and certapi-2 start on new, empty claims and join. After each: the CA is
// the one before, the request made after the snapshot is gone, a new request is delivered, and the Secret
// and the webhook configuration of before are untouched (not re-issued, not re-injected), the
// certificate still verifying against the injected bundle.
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
	image := strings.TrimSpace(nodetest.Kubectl(t, cp, "-n", ns, "get", "statefulset", "certapi", "-o", "jsonpath={.spec.template.spec.containers[0].image}"))

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

	t.Log("certapi-0's volume lost, certapi-1 and certapi-2 keep the data of before")
	snap := saveSnapshot(t, "certapi-1")
	request("lost-1")
	start := time.Now()
	restoreCluster(t, kube, image, snap, 1, []string{"data-certapi-0"})
	t.Logf("figure: a three-member cluster restored (scaled to zero, certapi-0's claim made anew, the restore Pod, helm upgrade) to three pods Ready and the APIService Available: %s",
		time.Since(start).Round(time.Second))
	nodetest.Logged(t, cp, ns, "certapi-0", `action="Restart"`, "Etcd member is ready")
	for _, pod := range []string{"certapi-1", "certapi-2"} {
		nodetest.Logged(t, cp, ns, pod, `action="DiscardStale"`, "Moved the data of an earlier cluster epoch aside", "Promoted this etcd learner to a voting member")
	}
	restored([]string{"kept"}, "lost-1", "after-1")

	t.Log("every pod and every volume lost")
	snap = saveSnapshot(t, "certapi-2")
	request("lost-2")
	start = time.Now()
	restoreCluster(t, kube, image, snap, 2, []string{"data-certapi-0", "data-certapi-1", "data-certapi-2"})
	t.Logf("figure: a three-member cluster restored with every volume lost (scaled to zero, three claims deleted, certapi-0's made anew, the restore Pod, helm upgrade) to three pods Ready and the APIService Available: %s",
		time.Since(start).Round(time.Second))
	nodetest.Logged(t, cp, ns, "certapi-0", `action="Restart"`, "Etcd member is ready")
	for _, pod := range []string{"certapi-1", "certapi-2"} {
		nodetest.Logged(t, cp, ns, pod, `action="Join"`, "Added this member as an etcd learner", "Promoted this etcd learner to a voting member")
	}
	restored([]string{"kept", "after-1"}, "lost-2", "after-2")
}

// restoreCluster is docs/backup-and-restore.md's "Several members" procedure: certapi scaled to zero, the
// claims lost deleted (each gets a new volume), certapi-0's claim made anew if it was one of them, snap
// restored into it as certapi-0 with --cluster-epoch=epoch by a one-off Pod, and helm upgrade with
// etcd.cluster.epoch=epoch and three replicas; it returns once three pods are Ready and the APIService
// Available.
func restoreCluster(t *testing.T, kube kubernetes.Interface, image, snap string, epoch int, lost []string) {
	t.Helper()
	ctx := context.Background()
	nodetest.Kubectl(t, cp, "-n", ns, "scale", "statefulset/certapi", "--replicas=0")
	nodetest.WaitFor(t, 3*time.Minute, "every certapi pod gone", func(ctx context.Context) (bool, string) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
	})
	for _, claim := range lost {
		nodetest.Kubectl(t, cp, "-n", ns, "delete", "pvc", claim, "--wait=true", "--timeout=2m")
		// The volume the claim gets next, as kind's storage provisioner would make it.
		if err := cp.CreateHostPathPV(ctx, fmt.Sprintf("certapi-%s-epoch-%d", claim, epoch), "1Gi"); err != nil {
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
	e := strconv.Itoa(epoch)
	out := restoreInto(t, image, "data-certapi-0", snap,
		"--force", "--member-name=certapi-0", "--peer-url=https://certapi-0.certapi-peers."+ns+".svc:2380", "--cluster-epoch="+e)
	if !strings.Contains(out, "--etcd-cluster-epoch="+e) {
		t.Errorf("the restore's output does not say to start the members with --etcd-cluster-epoch=%s:\n%s", e, out)
	}
	helm(t, "upgrade", "certapi", releaseChart(t), "--namespace", ns, "--reuse-values", "--set", "etcd.cluster.epoch="+e, "--set", "replicas=3")
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

// saveSnapshot streams a snapshot out of pod's member into a file, as docs/backup-and-restore.md says, and
// returns the file's path.
func saveSnapshot(t *testing.T, pod string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "certapi.db")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := time.Now()
	if err := cp.KubectlIO(context.Background(), nil, f, "-n", ns, "exec", pod, "--",
		"certapi", "snapshot", "save", "-", "--data-dir=/var/lib/certapi/data"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	info, err := snapshot.Verify(path)
	if err != nil {
		t.Fatalf("the snapshot streamed out of %s: %v", pod, err)
	}
	t.Logf("figure: kubectl exec %s -- certapi snapshot save -: %d bytes, %d keys, in %s", pod, info.Size, info.Keys, took.Round(time.Millisecond))
	return path
}

// restoreInto runs `certapi snapshot restore -` in a one-off Pod of image with claim mounted as certapi
// mounts its own, fed snap on stdin (`kubectl run -i`, as docs/backup-and-restore.md shows); it returns the
// command's output.
func restoreInto(t *testing.T, image, claim, snap string, args ...string) string {
	t.Helper()
	overrides := map[string]any{"spec": map[string]any{
		"securityContext": map[string]any{"runAsUser": 65532, "runAsGroup": 65532, "fsGroup": 65532, "runAsNonRoot": true},
		"containers": []any{map[string]any{
			"name": "certapi-restore", "image": image, "stdin": true, "stdinOnce": true,
			"args":         append([]string{"snapshot", "restore", "-", "--data-dir=/var/lib/certapi/data"}, args...),
			"volumeMounts": []any{map[string]any{"name": "data", "mountPath": "/var/lib/certapi"}},
		}},
		"volumes": []any{map[string]any{"name": "data", "persistentVolumeClaim": map[string]any{"claimName": claim}}},
	}}
	b, err := json.Marshal(overrides)
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(snap)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	if err := cp.KubectlIO(context.Background(), in, &out, "-n", ns, "run", "certapi-restore", "-i", "--rm", "--restart=Never",
		"--image="+image, "--overrides="+string(b), "--pod-running-timeout=3m"); err != nil {
		t.Fatalf("the restore Pod: %v\nstdout: %s", err, out.String())
	}
	t.Logf("the restore Pod:\n%s", out.String())
	return out.String()
}
