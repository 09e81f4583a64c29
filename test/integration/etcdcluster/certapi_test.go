package etcdcluster

import (
	"context"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
	"github.com/certapi/certapi/test/framework"
)

// TestCertapiClusterMode starts the certapi binary with --etcd-peer-service as the first member of a
// cluster: it creates the peer CA Secret, bootstraps its member over mutual TLS, records the bootstrap,
// stores its objects through it, and its APIService becomes Available.
func TestCertapiClusterMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), framework.StartTimeout)
	defer cancel()
	clientPort, peerPort := freePort(t), freePort(t)
	cp, err := framework.Start(ctx, framework.Options{
		Dir:                 t.TempDir(),
		CertapiEmbeddedEtcd: true,
		CertapiArgs: []string{
			"--etcd-peer-service=certapi-etcd." + framework.CertapiNamespace + ".svc",
			"--etcd-member-name=certapi-0",
			"--etcd-bind-address=127.0.0.1",
			"--etcd-client-port=" + clientPort,
			"--etcd-peer-port=" + peerPort,
		},
	})
	if err != nil {
		if cp != nil {
			framework.PrintLogTails(os.Stderr, cp.Logs())
		}
		t.Fatalf("starting certapi in cluster mode: %v", err)
	}
	defer cp.Stop()
	kube := kubernetes.NewForConfigOrDie(rest.CopyConfig(cp.AdminConfig))
	sec, err := kube.CoreV1().Secrets(framework.CertapiNamespace).Get(ctx, incluster.DefaultSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the peer CA Secret: %v", err)
	}
	if _, ok := sec.Annotations[incluster.AnnotationBootstrapped]; !ok {
		t.Fatalf("the peer CA Secret does not record the bootstrap: %v", sec.Annotations)
	}
	// certapi's own objects are in its etcd cluster: the CertificateAuthority exists and is served.
	raw, err := kube.RESTClient().Get().AbsPath("/apis/certapi.dev/v1alpha1/certificateauthorities/default").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the CertificateAuthority through kube-apiserver: %v (%s)", err, raw)
	}
}
