package framework_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/test/framework"
)

// TestControlPlaneStarts starts etcd and kube-apiserver, lists namespaces as admin, and checks
// that a user without RBAC bindings is forbidden.
func TestControlPlaneStarts(t *testing.T) {
	start := time.Now()
	cp := framework.StartT(t, framework.Options{SkipCertapi: true})
	t.Logf("control plane started in %s", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	admin, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatalf("admin clientset: %v", err)
	}
	nss, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing namespaces as admin: %v", err)
	}
	names := map[string]bool{}
	for _, ns := range nss.Items {
		names[ns.Name] = true
	}
	for _, want := range []string{"default", "kube-system"} {
		if !names[want] {
			t.Errorf("namespace %q missing from %v", want, names)
		}
	}

	aliceCfg, err := cp.UserConfig("alice", "developers")
	if err != nil {
		t.Fatalf("UserConfig: %v", err)
	}
	alice, err := kubernetes.NewForConfig(aliceCfg)
	if err != nil {
		t.Fatalf("alice clientset: %v", err)
	}
	_, err = alice.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing namespaces as alice: got %v, want 403 Forbidden", err)
	}
	if status, ok := err.(apierrors.APIStatus); ok && !strings.Contains(status.Status().Message, `"alice"`) {
		t.Errorf("forbidden message %q does not name alice", status.Status().Message)
	}

	for name, path := range cp.Logs() {
		t.Logf("log %s: %s", name, path)
	}
}

// TestCertapiRestart starts the whole stack with certapi built from ./cmd/certapi, then stops,
// restarts and kills certapi and checks that kube-apiserver routes to it again each time.
func TestCertapiRestart(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	admin, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatalf("admin clientset: %v", err)
	}
	checkDiscovery := func(when string) {
		t.Helper()
		if _, err := admin.Discovery().ServerResourcesForGroupVersion("certapi.dev/v1alpha1"); err != nil {
			t.Fatalf("%s: discovery of certapi.dev/v1alpha1 through kube-apiserver: %v", when, err)
		}
	}
	checkDiscovery("after Start")

	if err := cp.StopCertapi(); err != nil {
		t.Fatalf("StopCertapi: %v", err)
	}
	if cp.CertapiRunning() {
		t.Fatal("certapi still running after StopCertapi")
	}
	if err := cp.StartCertapi(ctx); err != nil {
		t.Fatalf("StartCertapi after stop: %v", err)
	}
	if err := cp.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	checkDiscovery("after StopCertapi+StartCertapi")

	if err := cp.KillCertapi(); err != nil {
		t.Fatalf("KillCertapi: %v", err)
	}
	if err := cp.StartCertapi(ctx); err != nil {
		t.Fatalf("StartCertapi after kill: %v", err)
	}
	if err := cp.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatalf("after kill and restart: %v", err)
	}
	checkDiscovery("after KillCertapi+StartCertapi")
}
