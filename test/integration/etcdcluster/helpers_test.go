package etcdcluster

import (
	"context"
	"crypto/tls"
	"os"
	"testing"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certapi/certapi/test/framework"
)

// tlsClientConfig is the client side of the members' mutual TLS, from a member's files.
func tlsClientConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	return transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile}.ClientConfig()
}

// startKubeAPIServer starts etcd and kube-apiserver alone, stopped with the test, and creates namespace
// ns; it returns an admin client.
func startKubeAPIServer(ctx context.Context, t *testing.T, ns string) kubernetes.Interface {
	t.Helper()
	cp, err := framework.Start(ctx, framework.Options{Dir: t.TempDir(), SkipCertapi: true})
	if err != nil {
		if cp != nil {
			framework.PrintLogTails(os.Stderr, cp.Logs())
		}
		t.Fatalf("starting etcd and kube-apiserver: %v", err)
	}
	t.Cleanup(cp.Stop)
	kube := kubernetes.NewForConfigOrDie(rest.CopyConfig(cp.AdminConfig))
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return kube
}
