package chart

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
)

// TestClusterModePeerCASecret installs the chart with etcd.mode cluster, in each peer CA custody, and acts
// as certapi's ServiceAccount: it may create its etcd peer CA Secret in its own namespace (with custody
// etcd, the default, with no key in it), read it back and record the bootstrap on it, rotate it, and read
// its StatefulSet; the admission policies refuse any other Secret there and any other change to the peer
// CA Secret (with custody etcd, any key written into it).
func TestClusterModePeerCASecret(t *testing.T) {
	for _, custody := range []string{"etcd", "secret"} {
		t.Run(custody, func(t *testing.T) { testClusterModePeerCASecret(t, custody) })
	}
}

func testClusterModePeerCASecret(t *testing.T, custody string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := "certapi-cluster-mode-" + custody
	runHelm(t, "install", release, chartDir, "--namespace", ns, "--create-namespace", "--set", "etcd.cluster.peerCACustody="+custody,
		"--set", "etcd.mode=cluster", "--set", "replicas=3", "--set", "encryption.enabled=false", "--set", "encryption.required=false").must(t)
	defer func() { runHelm(t, "uninstall", release, "--namespace", ns).must(t) }()
	publicOnly := custody == "etcd"

	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + release}
	asCertapi := kubernetes.NewForConfigOrDie(cfg)
	secrets := asCertapi.CoreV1().Secrets(ns)

	// RBAC and the policies take effect once kube-apiserver has loaded them: wait until another Secret in
	// the release namespace is refused by the Secret policy, which it must be (RBAC allows it).
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": []byte("x"), "tls.key": []byte("y")}}
		_, lastErr = secrets.Create(ctx, other, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return lastErr != nil && strings.Contains(lastErr.Error(), "ValidatingAdmissionPolicy '"+release+"-secrets'"), nil
	})
	if err != nil {
		t.Fatalf("certapi may still create another Secret in its namespace: %v", lastErr)
	}

	s := &incluster.PeerCASecret{Client: asCertapi, Namespace: ns, Name: release + "-etcd-peer-ca", Member: release + "-0", PublicOnly: publicOnly, Designated: true}
	ca, err := s.LoadOrCreate(ctx)
	if err != nil {
		t.Fatalf("certapi cannot create its etcd peer CA Secret: %v", err)
	}
	if sec, err := secrets.Get(ctx, release+"-etcd-peer-ca", metav1.GetOptions{}); err != nil || (len(sec.Data["tls.key"]) == 0) != publicOnly {
		t.Fatalf("the peer CA Secret with custody %s: %v, %d bytes of key", custody, err, len(sec.Data["tls.key"]))
	}
	again, err := s.LoadOrCreate(ctx)
	if err != nil || !again.Certificate.Equal(ca.Certificate) {
		t.Fatalf("reading the peer CA back: %v (same CA: %v)", err, err == nil && again.Certificate.Equal(ca.Certificate))
	}
	if err := (&incluster.PeerCASecret{Client: asCertapi, Namespace: ns, Name: release + "-etcd-peer-ca", Member: release + "-1", PublicOnly: publicOnly}).ReportNoData(ctx); err != nil {
		t.Fatalf("certapi cannot report that a member has no data: %v", err)
	}
	if err := s.Record(ctx); err != nil {
		t.Fatalf("certapi cannot record the bootstrap (and remove the reports): %v", err)
	}
	if existed, err := s.Existed(ctx); err != nil || !existed {
		t.Fatalf("Existed = %v, %v; want true", existed, err)
	}
	if _, err := asCertapi.AppsV1().StatefulSets(ns).Get(ctx, release, metav1.GetOptions{}); err != nil {
		t.Fatalf("certapi cannot read its StatefulSet: %v", err)
	}

	// The etcd leader's rotation: a new CA trusted beside the old one, then the old one dropped.
	// The CA as made, with its key (with custody etcd the Secret gives the public part only).
	next, err := ca.Successor(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Replace(ctx, ca, next, "r1"); err != nil {
		t.Fatalf("certapi cannot begin a peer CA rotation: %v", err)
	}
	if err := s.Replace(ctx, next, next.Settled(), ""); err != nil {
		t.Fatalf("certapi cannot finish a peer CA rotation: %v", err)
	}

	refused := map[string]func() error{
		"replace the CA key without its certificate": func() error {
			_, err := secrets.Patch(ctx, release+"-etcd-peer-ca", types.MergePatchType, []byte(`{"data":{"tls.key":"eA=="}}`), metav1.PatchOptions{})
			return err
		},
		"add another data key": func() error {
			_, err := secrets.Patch(ctx, release+"-etcd-peer-ca", types.MergePatchType, []byte(`{"data":{"other":"eA=="}}`), metav1.PatchOptions{})
			return err
		},
		"remove the trust bundle": func() error {
			_, err := secrets.Patch(ctx, release+"-etcd-peer-ca", types.MergePatchType, []byte(`{"data":{"ca.crt":null}}`), metav1.PatchOptions{})
			return err
		},
		"add another annotation": func() error {
			_, err := secrets.Patch(ctx, release+"-etcd-peer-ca", types.MergePatchType, []byte(`{"metadata":{"annotations":{"x":"y"}}}`), metav1.PatchOptions{})
			return err
		},
		"delete it": func() error { return secrets.Delete(ctx, release+"-etcd-peer-ca", metav1.DeleteOptions{}) },
	}
	if publicOnly {
		refused["write a key with its certificate"] = func() error {
			keyPEM, err := next.KeyPEM()
			if err != nil {
				t.Fatal(err)
			}
			sec, err := secrets.Get(ctx, release+"-etcd-peer-ca", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sec.Data["tls.key"] = keyPEM
			_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
			return err
		}
	}
	for what, f := range refused {
		if err := f(); !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			t.Errorf("certapi may %s of its etcd peer CA Secret: %v", what, err)
		}
	}
}

// TestClusterModeNotScaledToOne: the single-replica switch is for an install: `helm upgrade --set
// replicas=1` of a running cluster of three is refused, saying why (the etcd leader never shrinks a
// cluster to one member), while scaling up stays allowed.
func TestClusterModeNotScaledToOne(t *testing.T) {
	const ns = "certapi-scale-to-one"
	runHelm(t, "install", release, chartDir, "--namespace", ns, "--create-namespace",
		"--set", "encryption.enabled=false", "--set", "encryption.required=false").must(t)
	defer func() { runHelm(t, "uninstall", release, "--namespace", ns).must(t) }()
	r := runHelm(t, "upgrade", release, chartDir, "--namespace", ns, "--reuse-values", "--set", "replicas=1")
	if r.err == nil || !strings.Contains(r.stderr, "a running cluster cannot be scaled down to one") {
		t.Errorf("helm upgrade --set replicas=1 of a cluster of three: %v, stderr %q; want it refused, saying why", r.err, r.stderr)
	}
	runHelm(t, "upgrade", release, chartDir, "--namespace", ns, "--reuse-values", "--set", "replicas=5").must(t)
}
