package e2e

import (
	"context"
	"crypto/elliptic"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// rotationPlane is a control plane whose rotation can run to its end within a test: a short grace
// period and certificates of at most 20 s, so a Retiring CA leaves the bundle 20 s after the switch.
func rotationPlane(t *testing.T) *framework.ControlPlane {
	return framework.StartT(t, framework.Options{CertapiArgs: []string{"--rotation-grace=2s", "--max-certificate-duration=20s"}})
}

func roles(ca *certapiv1alpha1.CertificateAuthority) map[certapiv1alpha1.CertificateAuthorityRole]int {
	out := map[certapiv1alpha1.CertificateAuthorityRole]int{}
	for _, c := range ca.Status.Certificates {
		out[c.Role]++
	}
	return out
}

func TestForcedRotationRunsToTheEnd(t *testing.T) {
	ctx := context.Background()
	own := rotationPlane(t)
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	old := e2etest.ActiveSerial(t, own)

	deliveredRequest(t, c, kube, ns, "rot")
	// A request served only through the subresource, never re-issued during the rotation.
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("plain", "plain"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	issueOn(t, own, ns, "plain", e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil))

	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.ForceRotation = "e2e-1" })
	// Next is published first: trusted everywhere before it signs.
	var nextSerial string
	e2etest.Eventually(t, 30*time.Second, "the Next CA in the bundle, or the switch", func(context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		for _, cert := range ca.Status.Certificates {
			if cert.Role == certapiv1alpha1.CARoleNext {
				nextSerial = cert.SerialNumber
			}
		}
		return nextSerial != "" || ca.Status.Active.SerialNumber != old, nil
	})
	// Then the switch: the new CA signs, the old one is Retiring, and the Secret's ca.crt holds both.
	e2etest.Eventually(t, 30*time.Second, "the switch", func(context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		r := roles(ca)
		return ca.Status.Active.SerialNumber != old && r[certapiv1alpha1.CARoleRetiring] == 1, nil
	})
	newSerial := e2etest.CAObject(t, c).Status.Active.SerialNumber
	if nextSerial != "" && nextSerial != newSerial {
		t.Errorf("Active is %s, want the published Next %s", newSerial, nextSerial)
	}
	out := issueOn(t, own, ns, "rot", e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil))
	leafCA := e2etest.IssuerSerialOf(t, out.Status.Certificate, out.Status.CABundle)
	if leafCA != newSerial {
		t.Errorf("a certificate issued after the switch is from %s, want %s", leafCA, newSerial)
	}
	s := waitSecret(t, kube, ns, "rot-tls", func(s *corev1.Secret) bool { return e2etest.BundleSize(s.Data["ca.crt"]) == 2 })
	verifySecret(t, s, "rot", ns)
	// Finally the Retiring CA leaves, 20 s (the maximum certificate lifetime here) after the switch.
	e2etest.Eventually(t, 60*time.Second, "the Retiring CA to leave the bundle", func(context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		return len(ca.Status.Certificates) == 1 && e2etest.BundleSize([]byte(ca.Status.CABundle)) == 1, nil
	})
	// Every request's status follows the bundle, including one nobody re-issued.
	final := e2etest.CAObject(t, c).Status.CABundle
	e2etest.Eventually(t, 30*time.Second, "the plain request's status.caBundle to follow", func(ctx context.Context) (bool, error) {
		r, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "plain", metav1.GetOptions{})
		return err == nil && r.Status.CABundle == final, nil
	})
	s = waitSecret(t, kube, ns, "rot-tls", func(s *corev1.Secret) bool { return e2etest.BundleSize(s.Data["ca.crt"]) == 1 })
	if got := e2etest.IssuerSerialOf(t, string(s.Data["tls.crt"]), string(s.Data["ca.crt"])); got != newSerial {
		t.Errorf("the Secret's certificate is from %s, want %s", got, newSerial)
	}
	// Every step is an Event regarding the CertificateAuthority, readable from kube-apiserver.
	waitCAEvents(t, kube, corev1.EventTypeNormal, "PublishNext", "Switch", "Retire")
}

// waitCAEvents waits for an Event of each reason regarding CertificateAuthority/default, of eventType,
// reported by certapi's rotation; their notes carry no key material.
func waitCAEvents(t *testing.T, kube kubernetes.Interface, eventType string, reasons ...string) {
	t.Helper()
	e2etest.Eventually(t, 30*time.Second, fmt.Sprintf("the CertificateAuthority's Events %v", reasons), func(ctx context.Context) (bool, error) {
		evs, err := kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		seen := map[string]bool{}
		for _, ev := range evs.Items {
			if ev.Regarding.Kind == "CertificateAuthority" && ev.Regarding.Name == "default" &&
				ev.Regarding.APIVersion == "certapi.dev/v1alpha1" && ev.ReportingController == "certapi.dev/rotation" {
				if ev.Type == eventType {
					seen[ev.Reason] = true
				}
				if strings.Contains(ev.Note, "PRIVATE KEY") {
					t.Fatalf("an Event carries key material: %q", ev.Note)
				}
			}
		}
		for _, r := range reasons {
			if !seen[r] {
				return false, nil
			}
		}
		return true, nil
	})
}

func TestDistrustReplacesTheCAAtOnce(t *testing.T) {
	own := rotationPlane(t)
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	old := e2etest.ActiveSerial(t, own)
	deliveredRequest(t, c, kube, ns, "dis")
	// A webhook on pkg/servingcert, called through kube-apiserver every 100 ms during the distrust.
	w := startWebhook(t, own, ns, "guard", admissionHandler(t))
	registerValidatingWebhook(t, kube, w)
	e2etest.Eventually(t, 30*time.Second, "the webhook to answer through kube-apiserver", func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("warm-%d", time.Now().UnixNano())), metav1.CreateOptions{})
		return err == nil, nil
	})
	stop := make(chan struct{})
	failures := make(chan error, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("d-%d", i)), metav1.CreateOptions{}); err != nil {
				failures <- err
			}
			cancel()
		}
	}()

	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.Distrust = "key-leaked" })
	// Well before any Retiring period could end: new Active, Secret re-issued, old CA gone.
	start := time.Now()
	e2etest.Eventually(t, 15*time.Second, "the distrusted CA to leave the bundle", func(context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		return ca.Status.Active.SerialNumber != old && len(ca.Status.Certificates) == 1, nil
	})
	t.Logf("distrusted CA dropped %s after the request", time.Since(start).Round(time.Millisecond))
	s := waitSecret(t, kube, ns, "dis-tls", func(s *corev1.Secret) bool { return e2etest.BundleSize(s.Data["ca.crt"]) == 1 })
	if got := e2etest.IssuerSerialOf(t, string(s.Data["tls.crt"]), string(s.Data["ca.crt"])); got == old {
		t.Fatal("the Secret still holds a certificate from the distrusted CA")
	}
	// The library re-issued at once on the Distrusted signal, so its webhook never lost trust.
	cert, err := w.source.GetCertificate(nil)
	if err != nil || e2etest.IssuerSerialOf(t, pemOf(cert), e2etest.CAObject(t, c).Status.CABundle) == old {
		t.Fatalf("the webhook still serves a certificate from the distrusted CA (%v)", err)
	}
	waitCAEvents(t, kube, corev1.EventTypeWarning, "Distrust")
	waitCAEvents(t, kube, corev1.EventTypeNormal, "DropDistrusted")
	close(stop)
	<-done
	close(failures)
	for err := range failures {
		t.Errorf("a call to the webhook failed during the distrust: %v", err)
	}
}

// deliveredRequest opts ns in to Secret delivery, creates a request for Service name with secretName
// <name>-tls and waits for the Secret.
func deliveredRequest(t *testing.T, c versioned.Interface, kube kubernetes.Interface, ns, name string) {
	t.Helper()
	e2etest.OptIn(t, kube, ns)
	req := e2etest.Request(name, name)
	req.Spec.SecretName = name + "-tls"
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), req, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSecret(t, kube, ns, name+"-tls", nil)
}
