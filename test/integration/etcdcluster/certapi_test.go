package etcdcluster

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/etcdcluster/incluster"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestCertapiClusterMode starts the certapi binary with --etcd-peer-service as the first member of a
// cluster: it creates the peer CA Secret, bootstraps its member over mutual TLS, records the bootstrap,
// stores its objects through it, and its APIService becomes Available.
func TestCertapiClusterMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), framework.StartTimeout)
	defer cancel()
	cp, _ := startCertapiMember(ctx, t)
	kube := kubernetes.NewForConfigOrDie(rest.CopyConfig(cp.AdminConfig))
	sec, err := kube.CoreV1().Secrets(framework.CertapiNamespace).Get(ctx, incluster.DefaultSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the peer CA Secret: %v", err)
	}
	if _, ok := sec.Annotations[incluster.AnnotationBootstrapped]; !ok {
		t.Fatalf("the peer CA Secret does not record the bootstrap: %v", sec.Annotations)
	}
	if len(sec.Data["tls.crt"]) == 0 || len(sec.Data["tls.key"]) != 0 {
		t.Fatalf("the peer CA Secret holds %d bytes of certificate and %d of key; want the certificate only (custody etcd, the default)", len(sec.Data["tls.crt"]), len(sec.Data["tls.key"]))
	}
	// certapi's own objects are in its etcd cluster: the CertificateAuthority exists and is served.
	raw, err := kube.RESTClient().Get().AbsPath("/apis/certapi.dev/v1alpha1/certificateauthorities/default").DoRaw(ctx)
	if err != nil {
		t.Fatalf("reading the CertificateAuthority through kube-apiserver: %v (%s)", err, raw)
	}

	t.Log("the replica whose member is the etcd leader shows the cluster in status.etcd")
	certapi, _ := testhelpers.Clients(t, cp.AdminConfig)
	var first *certapiv1alpha1.EtcdPeerCAStatus
	testhelpers.WaitFor(t, 100*time.Millisecond, time.Minute, "status.etcd with certapi-0, the etcd leader, healthy", func(ctx context.Context) (bool, string) {
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, "" // the last status seen says more
		}
		e := ca.Status.Etcd
		if e == nil || e.Leader != "certapi-0" || len(e.Members) != 1 || !e.Members[0].Healthy || e.PeerCA == nil || e.PeerCA.RotateAt == nil {
			return false, fmt.Sprintf("%+v", e)
		}
		first = e.PeerCA
		return true, ""
	})

	t.Log("asked for on the Secret, the peer CA rotates with certapi serving throughout")
	patch := []byte(`{"metadata":{"annotations":{"` + certapiv1alpha1.AnnotationEtcdPeerCARotate + `":"test"}}}`)
	if _, err := kube.CoreV1().Secrets(framework.CertapiNamespace).Patch(ctx, incluster.DefaultSecretName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	reads, failed := 0, 0
	took := testhelpers.WaitFor(t, 100*time.Millisecond, time.Minute, "status.etcd to show a new peer CA, settled", func(ctx context.Context) (bool, string) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(rctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		reads++
		if err != nil {
			failed++
			return false, err.Error()
		}
		if ca.Status.Etcd == nil {
			return false, "no status.etcd"
		}
		p := ca.Status.Etcd.PeerCA
		return p != nil && p.SerialNumber != first.SerialNumber && !p.Rotating, fmt.Sprintf("%+v", p)
	})
	t.Logf("figure: the peer CA of a one-member cluster rotated, as status.etcd shows, %s after the request", took.Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("%d of %d reads of the CertificateAuthority through kube-apiserver failed during the peer CA rotation", failed, reads)
	}
	sec, err = kube.CoreV1().Secrets(framework.CertapiNamespace).Get(ctx, incluster.DefaultSecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sec.Annotations[certapiv1alpha1.AnnotationEtcdPeerCARotated]; got != "test" || len(sec.Data["chain.crt"]) == 0 {
		t.Fatalf("after the rotation the Secret records %q as handled and holds %d bytes of chain", got, len(sec.Data["chain.crt"]))
	}
}

// startCertapiMember starts the certapi binary as member certapi-0 of a cluster, on ports of this machine,
// with extra flags after the cluster-mode ones; it returns the control plane and the member's client port.
// certapi stops with the test, and prints its logs' tails when the test has failed.
func startCertapiMember(ctx context.Context, t *testing.T, extra ...string) (*framework.ControlPlane, string) {
	t.Helper()
	clientPort, peerPort := freePort(t), freePort(t)
	// The default custody (etcd) reads this pod's projected token for the ServiceAccount its peers' tokens
	// must be of. certapi-0 bootstraps and never sends it, so its claims are all it needs here.
	claims := base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"system:serviceaccount:` + framework.CertapiNamespace + `:certapi"}`))
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("e30."+claims+".unsigned"), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := framework.Start(ctx, framework.Options{
		Dir:                 t.TempDir(),
		CertapiEmbeddedEtcd: true,
		CertapiArgs: append([]string{
			"--etcd-peer-service=certapi-etcd." + framework.CertapiNamespace + ".svc",
			"--etcd-member-name=certapi-0",
			"--etcd-bind-address=127.0.0.1",
			"--etcd-client-port=" + clientPort,
			"--etcd-peer-port=" + peerPort,
			"--etcd-member-token-file=" + tokenFile,
			"-v=1",
		}, extra...),
	})
	if err != nil {
		if cp != nil {
			framework.PrintLogTails(os.Stderr, cp.Logs())
		}
		t.Fatalf("starting certapi in cluster mode: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			framework.PrintLogTails(os.Stderr, cp.Logs())
		}
		cp.Stop()
	})
	return cp, clientPort
}
