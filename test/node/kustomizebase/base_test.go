// Package kustomizebase installs artifacts/deploy/base, what the Helm chart installs by default, with
// `kubectl apply -k` on a control plane with a real node (framework's InstallCertapiHA, which `make
// local-up NODE=1 HA=1` runs): three certapi replicas in a StatefulSet whose embedded etcd members form one
// etcd cluster, all on the one node (the spreading is preferred). It has a cluster of its own: the base
// takes the same names as test/node's single replica and test/node/ha's overlay.
package kustomizebase

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
)

const (
	ns = framework.CertapiNamespace
	// selector selects certapi's pods.
	selector = "app.kubernetes.io/name=certapi,app.kubernetes.io/component=apiserver"
)

var cp *framework.ControlPlane

func TestMain(m *testing.M) {
	os.Exit(nodetest.Run(m, "certapi-node-kustomizebase-", func(context.Context, string) (map[string]string, error) {
		archive, err := framework.ImageArchive("certapi.tar")
		if err != nil {
			return nil, err
		}
		return map[string]string{"certapi": archive}, nil
	}, func(c *framework.ControlPlane, _ map[string]string) { cp = c }))
}

// logPodsOnFailure logs, when the test has failed, the pods and the last lines of certapi's.
func logPodsOnFailure(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		out, _ := nodetest.KubectlErr(cp, "-n", ns, "get", "pods,pvc", "-o", "wide")
		t.Logf("pods and claims:\n%s", out)
		for i := range 3 {
			pod := fmt.Sprintf("certapi-%d", i)
			out, _ := nodetest.KubectlErr(cp, "-n", ns, "logs", "--tail=40", pod)
			t.Logf("%s, last lines:\n%s", pod, out)
		}
		out, _ = nodetest.KubectlErr(cp, "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
		t.Logf("events:\n%s", out)
	})
}

// TestKustomizeBase: `kubectl apply -k artifacts/deploy/base` (the node's image, and no Secret made by hand
// but the encryption configuration) brings up three certapi pods on the one node whose etcd members form
// one cluster: certapi-0 bootstraps it, certapi-1 and certapi-2 join as learners and are promoted; the etcd
// leader reports three healthy voters in CertificateAuthority/default; there is exactly one CA; certapi
// made its peer CA Secret itself, with no key in it (custody etcd); after docs/usage.md's opt-in block,
// `kubectl create servingcertrequest --secret --wait` gets its Secret; and docs/operating.md's
// uninstall-kustomize block removes it all, leaving discovery whole and namespace deletion working.
func TestKustomizeBase(t *testing.T) {
	nodetest.PluginBinary(t, "kubectl-create-servingcertrequest")
	ctx := context.Background()
	kube, certapi := nodetest.Clients(t, cp)
	logPodsOnFailure(t)
	start := time.Now()
	if err := cp.InstallCertapiHA(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("figure: artifacts/deploy/base, `kubectl apply -k` to three members Ready and the APIService Available: %s", time.Since(start).Round(time.Second))

	if ok, state := nodetest.PodsReady(ctx, kube, ns, selector, 3); !ok {
		t.Fatalf("want three certapi pods Ready after the rollout: %s", state)
	}
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != cp.ClusterNode.Name {
			t.Errorf("pod %s on node %q; want the one node %s", p.Name, p.Spec.NodeName, cp.ClusterNode.Name)
		}
	}

	nodetest.Logged(t, cp, ns, "certapi-0", `action="Bootstrap"`, "Etcd member is ready")
	for _, pod := range []string{"certapi-1", "certapi-2"} {
		nodetest.Logged(t, cp, ns, pod, `action="Join"`, "Added this member as an etcd learner", "Promoted this etcd learner to a voting member")
	}
	// The etcd leader's view, in the CertificateAuthority's status: three healthy voters.
	nodetest.WaitFor(t, 2*time.Minute, "status.etcd of CertificateAuthority/default to list certapi-0, -1 and -2 as healthy voters", func(ctx context.Context) (bool, string) {
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if ca.Status.Etcd == nil {
			return false, "no status.etcd"
		}
		var voters []string
		for _, m := range ca.Status.Etcd.Members {
			if m.Role == certapiv1alpha1.EtcdMemberVoter && m.Healthy {
				voters = append(voters, m.Name)
			}
		}
		slices.Sort(voters)
		return slices.Equal(voters, []string{"certapi-0", "certapi-1", "certapi-2"}) && len(ca.Status.Etcd.Members) == 3,
			fmt.Sprintf("leader %s, members %+v", ca.Status.Etcd.Leader, ca.Status.Etcd.Members)
	})
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ca.Status.Certificates) != 1 || ca.Status.Certificates[0].Role != certapiv1alpha1.CARoleActive {
		t.Fatalf("want exactly one CA, Active, after three replicas started on empty volumes: %+v", ca.Status.Certificates)
	}

	// No Secret made by hand but the encryption configuration: certapi made the peer CA of its members.
	secrets, err := kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range secrets.Items {
		names = append(names, s.Name)
		if s.Name == "certapi-etcd-peer-ca" && s.Annotations[incluster.AnnotationBootstrapped] == "" {
			t.Errorf("the peer CA Secret has no %s annotation: %v", incluster.AnnotationBootstrapped, s.Annotations)
		}
		// The base's custody, etcd: the members keep the peer CA's key in their etcd, never in the Secret.
		if s.Name == "certapi-etcd-peer-ca" && (len(s.Data["tls.crt"]) == 0 || len(s.Data["tls.key"]) != 0) {
			t.Errorf("the peer CA Secret holds %d bytes of certificate and %d of key; want the certificate only", len(s.Data["tls.crt"]), len(s.Data["tls.key"]))
		}
	}
	slices.Sort(names)
	if want := []string{"certapi-encryption-config", "certapi-etcd-peer-ca"}; !slices.Equal(names, want) {
		t.Errorf("Secrets in %s: %v; want %v", ns, names, want)
	}

	// docs/usage.md's namespace, opted in to Secret delivery by its block as written.
	use := "team-a"
	nodetest.Kubectl(t, cp, "create", "namespace", use)
	nodetest.NewDocShell(t, cp).Run(t, "docs/usage.md", time.Minute, "namespace-opt-in")
	nodetest.Kubectl(t, cp, "create", "servingcertrequest", "web", "-n", use, "--service=web", "--secret=web-tls", "--wait")
	sec, err := kube.CoreV1().Secrets(use).Get(ctx, "web-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
		if len(sec.Data[k]) == 0 {
			t.Errorf("Secret %s/web-tls has no %s", use, k)
		}
	}

	// docs/operating.md's uninstall with kustomize, as written: the APIService first, then the base. After
	// it certapi's namespace is gone, and discovery answers for every group (no APIService left with
	// nothing behind it, which would stall every namespace deletion).
	start = time.Now()
	nodetest.NewDocShell(t, cp).Run(t, "docs/operating.md", 5*time.Minute, "uninstall-kustomize")
	nodetest.WaitFor(t, 3*time.Minute, "namespace "+ns+" gone after the uninstall", func(ctx context.Context) (bool, string) {
		_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("%v", err)
	})
	if out, err := nodetest.KubectlErr(cp, "api-resources"); err != nil {
		t.Errorf("discovery after the uninstall: %v\n%s", err, out)
	}
	nodetest.Kubectl(t, cp, "delete", "namespace", use, "--wait=true", "--timeout=2m")
	t.Logf("figure: docs/operating.md's uninstall-kustomize block, and a namespace deleted after it: %s", time.Since(start).Round(time.Second))
}
