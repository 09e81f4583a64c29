package nodetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// CACertificates is the CertificateAuthority's CAs as role and subject key id, in order: what a
// disruption or a restore must leave as it was.
func CACertificates(ca *certapiv1alpha1.CertificateAuthority) string {
	if ca == nil {
		return "none"
	}
	var parts []string
	for _, c := range ca.Status.Certificates {
		parts = append(parts, fmt.Sprintf("%s:%s", c.Role, c.SubjectKeyID))
	}
	return strings.Join(parts, ",")
}

// RestoreNamespace is the namespace of Kept's requests, Secrets and webhook Service.
const RestoreNamespace = "restore"

// restoreWebhook opts into injection; failurePolicy Ignore and a resource nobody has: it is never called.
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

// Kept is what a restore of certapi's etcd must keep as it was, recorded before it: the CAs, a request
// ("kept") delivered into a Secret, and a webhook configuration certapi injected.
type Kept struct {
	cp      *framework.ControlPlane
	kube    kubernetes.Interface
	certapi versioned.Interface
	cas     string
	secret  *corev1.Secret
	webhook *admissionregistrationv1.ValidatingWebhookConfiguration
}

// KeepForRestore makes what Kept records: RestoreNamespace, the request "kept" delivered, the webhook
// configuration "restore-webhook" injected; both are deleted when t ends.
func KeepForRestore(t *testing.T, cp *framework.ControlPlane) *Kept {
	t.Helper()
	ctx := context.Background()
	k := &Kept{cp: cp}
	k.kube, k.certapi = Clients(t, cp)
	Kubectl(t, cp, "create", "namespace", RestoreNamespace)
	// Opt the namespace in to Secret delivery, as docs/usage.md says.
	Kubectl(t, cp, "create", "rolebinding", "certapi-secret-delivery", "-n", RestoreNamespace, "--clusterrole=certapi:secret-delivery", "--serviceaccount=certapi-system:certapi")
	Kubectl(t, cp, "label", "namespace", RestoreNamespace, "certapi.dev/secret-delivery=enabled")
	t.Cleanup(func() {
		_, _ = KubectlErr(cp, "delete", "namespace", RestoreNamespace, "--ignore-not-found", "--wait=false")
	})
	ca, err := k.certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	k.cas = CACertificates(ca)
	k.Deliver(t, "kept")
	hook := filepath.Join(t.TempDir(), "webhook.yaml")
	if err := os.WriteFile(hook, []byte(restoreWebhook), 0o644); err != nil {
		t.Fatal(err)
	}
	Kubectl(t, cp, "apply", "-f", hook)
	t.Cleanup(func() {
		_, _ = KubectlErr(cp, "delete", "validatingwebhookconfiguration", "restore-webhook", "--ignore-not-found")
	})
	k.webhook = k.injected(t)
	if k.secret, err = k.kube.CoreV1().Secrets(RestoreNamespace).Get(ctx, "kept-tls", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	return k
}

// Deliver creates the request name in RestoreNamespace with kubectl (Service name, Secret name-tls) and
// waits for its Secret.
func (k *Kept) Deliver(t *testing.T, name string) {
	t.Helper()
	Kubectl(t, k.cp, "create", "servingcertrequest", name, "-n", RestoreNamespace, "--service="+name, "--secret="+name+"-tls")
	WaitFor(t, 2*time.Minute, "the Secret of request "+name, func(ctx context.Context) (bool, string) {
		s, err := k.kube.CoreV1().Secrets(RestoreNamespace).Get(ctx, name+"-tls", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(s.Data["tls.crt"]) > 0, "no tls.crt"
	})
}

// injected waits until restore-webhook's caBundle is the CertificateAuthority's bundle and returns it.
func (k *Kept) injected(t *testing.T) *admissionregistrationv1.ValidatingWebhookConfiguration {
	t.Helper()
	var vwc *admissionregistrationv1.ValidatingWebhookConfiguration
	WaitFor(t, 2*time.Minute, "restore-webhook's caBundle to be certapi's bundle", func(ctx context.Context) (bool, string) {
		ca, err := k.certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if vwc, err = k.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "restore-webhook", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		got := string(vwc.Webhooks[0].ClientConfig.CABundle)
		return got != "" && got == ca.Status.CABundle, fmt.Sprintf("caBundle %d bytes, the CA's %d", len(got), len(ca.Status.CABundle))
	})
	return vwc
}

// Restored checks, after a restore, the CAs of before; the requests kept (made before the snapshot)
// there and lost (made after it) gone; a new request, after, delivered; and the Secret of "kept" and
// the webhook configuration not written since they were recorded (not re-issued, not re-injected), the
// certificate verifying against the bundle injected.
func (k *Kept) Restored(t *testing.T, kept []string, lost, after string) {
	t.Helper()
	ctx := context.Background()
	requests := k.certapi.CertapiV1alpha1().ServingCertRequests(RestoreNamespace)
	ca, err := k.certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil || CACertificates(ca) != k.cas {
		t.Errorf("the CAs after the restore: %v: %s; want those of before, %s", err, CACertificates(ca), k.cas)
	}
	if lost != "" {
		if _, err := requests.Get(ctx, lost, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the request %s made after the snapshot: %v; want it gone with the restore", lost, err)
		}
	}
	for _, name := range kept {
		if _, err := requests.Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("the request %s made before the snapshot: %v", name, err)
		}
	}
	// A request made now is delivered and the webhook configuration holds the bundle: the restored
	// leader signs and injects, and its queues, first in first out, have seen what was there before.
	k.Deliver(t, after)
	vwc := k.injected(t)
	if vwc.ResourceVersion != k.webhook.ResourceVersion {
		t.Errorf("restore-webhook was written after the restore (resourceVersion %s, before %s): re-injected", vwc.ResourceVersion, k.webhook.ResourceVersion)
	}
	secret, err := k.kube.CoreV1().Secrets(RestoreNamespace).Get(ctx, "kept-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if secret.ResourceVersion != k.secret.ResourceVersion || !bytes.Equal(secret.Data["tls.crt"], k.secret.Data["tls.crt"]) {
		t.Errorf("the Secret of the request made before the snapshot was written after the restore (resourceVersion %s, before %s): re-issued",
			secret.ResourceVersion, k.secret.ResourceVersion)
	}
	if err := testhelpers.VerifyServingSecret(secret, vwc.Webhooks[0].ClientConfig.CABundle, "kept", RestoreNamespace); err != nil {
		t.Errorf("the certificate of before does not verify against the bundle injected after the restore: %v", err)
	}
}

// EnforceRestricted labels namespace ns as artifacts/deploy/base makes certapi-system: Pod Security
// "restricted" enforced. The restore blocks of docs/backup-and-restore.md run where it is, so that a
// restore Pod the policy refuses fails the test, as it would fail a user in the middle of a recovery
// (test/docs checks the same Pods with a server-side dry run).
func EnforceRestricted(t *testing.T, cp *framework.ControlPlane, ns string) {
	t.Helper()
	Kubectl(t, cp, "label", "namespace", ns, "--overwrite",
		"pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")
}

// KeepEarlierSnapshot moves a snapshot an earlier block left in shell's directory (certapi.db and its
// integrity record) aside, to certapi-N.db, as a user keeps the copies they took: `kubectl certapi snapshot
// save` never overwrites a file.
func KeepEarlierSnapshot(t *testing.T, shell *DocShell) {
	t.Helper()
	for n := 1; ; n++ {
		to := filepath.Join(shell.Dir, fmt.Sprintf("certapi-%d.db", n))
		if _, err := os.Stat(to); err == nil {
			continue
		}
		for _, suffix := range []string{"", ".integrity"} {
			if err := os.Rename(filepath.Join(shell.Dir, "certapi.db"+suffix), to+suffix); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
		return
	}
}
