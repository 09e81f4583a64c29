package e2e

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// namespace creates a namespace with a generated name for one test, and deletes it afterwards.
func namespace(t *testing.T, kube kubernetes.Interface) string {
	t.Helper()
	ns, err := kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// request returns a minimal ServingCertRequest for service svc.
func request(name, svc string) *certapiv1alpha1.ServingCertRequest {
	return &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc},
	}
}

// eventually polls cond every 100ms until it returns true or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// tlsKeyPair checks that a PEM key matches a PEM certificate.
func tlsKeyPair(certPEM, keyPEM []byte) (tls.Certificate, error) {
	return tls.X509KeyPair(certPEM, keyPEM)
}
