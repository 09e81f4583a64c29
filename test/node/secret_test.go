package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// TestSecretDeliveredToPod measures, with kubelet's real Secret handling, what a webhook that reads its
// certificate from a Secret certapi delivers (spec.secretName) goes through: the pod is created with the
// request, waits for the Secret to exist to mount it, and serves the certificate; then a forced CA rotation
// reaches the pod only when certapi has re-issued the Secret and kubelet has synced the volume. The pod
// (test/framework/testdata/probe) reads tls.crt and tls.key at every handshake, as a webhook that reloads
// its files would, so the figures are certapi's and kubelet's alone. The test fails only on a deadline;
// the figures are logged (docs/performance.md, "On a real node").
func TestSecretDeliveredToPod(t *testing.T) {
	installCertapi(t)
	kube, certapi := clients(t)
	ctx := context.Background()
	ns, svc, secret := "secret-webhook", "tls-probe", "tls-probe-tls"
	kubectl(t, "create", "namespace", ns)
	// Opt the namespace in to Secret delivery, as docs/usage.md says.
	kubectl(t, "create", "rolebinding", "certapi-secret-delivery", "-n", ns, "--clusterrole=certapi:secret-delivery", "--serviceaccount=certapi-system:certapi")
	kubectl(t, "label", "namespace", ns, "certapi.dev/secret-delivery=enabled")
	labels := map[string]string{"app": svc}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(8443)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The request and the Deployment that mounts its Secret, created together, as one `kubectl apply`.
	created := time.Now()
	if _, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: svc},
		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc, SecretName: secret},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, tlsProbeDeployment(svc, secret, labels), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var secretAt time.Time
	var first *x509.Certificate
	waitFor(t, 5*time.Minute, "the pod serving a certificate from the delivered Secret", func(ctx context.Context) (bool, string) {
		if secretAt.IsZero() {
			if _, err := kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{}); err == nil {
				secretAt = time.Now()
			}
		}
		cert, err := servedCertificate(ctx, t, svc, ns)
		if err != nil {
			return false, err.Error()
		}
		first = cert
		return true, ""
	})
	served := time.Now()
	t.Logf("request created -> Secret delivered: %s; -> pod serving its certificate: %s", secretAt.Sub(created).Round(time.Millisecond), served.Sub(created).Round(time.Millisecond))

	// A forced rotation: certapi publishes the next CA, switches after --rotation-grace, re-issues the
	// Secret; kubelet syncs the volume.
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldActive := ca.Status.Active.SubjectKeyID
	if got := hex.EncodeToString(first.AuthorityKeyId); got != oldActive {
		t.Fatalf("served certificate's authority key id %s is not the Active CA's %s", got, oldActive)
	}
	rotated := time.Now()
	patch := fmt.Sprintf(`{"spec":{"forceRotation":"node-test-%d"}}`, rotated.UnixNano())
	if _, err := certapi.CertapiV1alpha1().CertificateAuthorities().Patch(ctx, "default", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	var switchedAt, reissuedAt time.Time
	var newActive string
	waitFor(t, 5*time.Minute, "the pod serving a certificate of the new CA", func(ctx context.Context) (bool, string) {
		if switchedAt.IsZero() {
			ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if ca.Status.Active == nil || ca.Status.Active.SubjectKeyID == oldActive {
				return false, "the new CA is not Active yet"
			}
			switchedAt, newActive = time.Now(), ca.Status.Active.SubjectKeyID
		}
		if reissuedAt.IsZero() {
			s, err := kube.CoreV1().Secrets(ns).Get(ctx, secret, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if c, err := parseCert(s.Data[corev1.TLSCertKey]); err == nil && hex.EncodeToString(c.AuthorityKeyId) == newActive {
				reissuedAt = time.Now()
			}
		}
		cert, err := servedCertificate(ctx, t, svc, ns)
		if err != nil {
			return false, err.Error()
		}
		if hex.EncodeToString(cert.AuthorityKeyId) != newActive {
			return false, "the pod still serves a certificate of the old CA"
		}
		return true, ""
	})
	now := time.Now()
	t.Logf("forced rotation -> new CA Active: %s (--rotation-grace=%s); -> Secret re-issued: %s; -> pod serving it: %s (kubelet's sync: %s)",
		switchedAt.Sub(rotated).Round(time.Millisecond), testRotationGrace, reissuedAt.Sub(rotated).Round(time.Millisecond),
		now.Sub(rotated).Round(time.Millisecond), now.Sub(reissuedAt).Round(time.Millisecond))
}

func tlsProbeDeployment(name, secret string, labels map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To(int64(0)),
					Containers: []corev1.Container{{
						Name:            "probe",
						Image:           images["probe"],
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"--tls-dir=/tls"},
						VolumeMounts:    []corev1.VolumeMount{{Name: "tls", MountPath: "/tls", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "tls", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: secret}}}},
				},
			},
		},
	}
}

// servedCertificate connects to port 8443 of the running pod of the Deployment name, verifies what it
// serves against certapi's CA bundle for the Service's name, and returns the leaf.
func servedCertificate(ctx context.Context, t *testing.T, name, ns string) (*x509.Certificate, error) {
	kube, certapi := clients(t)
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return nil, err
	}
	ip := ""
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			ip = p.Status.PodIP
		}
	}
	if ip == "" {
		return nil, errors.New("no running pod yet")
	}
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(ca.Status.CABundle)) {
		return nil, errors.New("no CA bundle")
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 2 * time.Second}, Config: &tls.Config{RootCAs: roots, ServerName: name + "." + ns + ".svc"}}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(ip, "8443"))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0], nil
}

func parseCert(data []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM")
	}
	return x509.ParseCertificate(b.Bytes)
}
