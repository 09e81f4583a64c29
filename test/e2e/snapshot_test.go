package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/client-go/kubernetes"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// snapshotPlane starts certapi with its embedded etcd and an EncryptionConfiguration that encrypts the CA keys.
func snapshotPlane(t *testing.T, certapiArgs ...string) (*framework.ControlPlane, string) {
	t.Helper()
	config, err := testhelpers.AESCBCEncryptionConfig("certificateauthoritykeys.certapi.dev")
	if err != nil {
		t.Fatal(err)
	}
	own := framework.StartT(t, framework.Options{CertapiEmbeddedEtcd: true, EncryptionConfig: config, CertapiArgs: certapiArgs})
	return own, filepath.Join(own.Dir, "certapi-data")
}

// certapiCmd runs the certapi binary under test with args and returns its output; it fails t when the
// command fails.
func certapiCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := certapiCmdErr(t, args...)
	if err != nil {
		t.Fatalf("certapi %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func certapiCmdErr(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// TestSnapshotRestoreBringsBackTheSameCA: issue into a Secret, inject a target, snapshot while certapi runs,
// stop certapi, delete its data dir, restore, start: the same CA is Active, the delivered certificate
// verifies against the injected bundle, and neither the Secret nor the target is written again. The snapshot
// holds the CA keys only encrypted.
func TestSnapshotRestoreBringsBackTheSameCA(t *testing.T) {
	ctx := context.Background()
	own, dataDir := snapshotPlane(t)
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	serial := e2etest.ActiveSerial(t, own)

	deliveredRequest(t, c, kube, ns, "web")
	waitReady(t, c, ns, "web", metav1.ConditionTrue, "Issued")
	target := injectionTarget(t, kube, ns)
	bundle := injectedBundle(t, kube, target, func(b []byte) bool { return holdsCA(b, serial) })
	secret, err := kube.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	verifyAgainst(t, secret, bundle, "web", ns)
	vwc, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "certapi.db")
	start := time.Now()
	out := certapiCmd(t, "snapshot", "save", file, "--data-dir="+dataDir)
	t.Logf("snapshot save (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	for _, want := range []string{"size: ", "revision: ", "keys: ", "hash: "} {
		if !strings.Contains(out, want) {
			t.Errorf("snapshot save printed no %q", strings.TrimSpace(want))
		}
	}

	t.Run("the snapshot holds the CA keys only encrypted", func(t *testing.T) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("k8s:enc:aescbc:v1:key1:")) {
			t.Error("the snapshot holds no value encrypted with the configuration's key: the CA record is missing or stored otherwise")
		}
		if found := plaintextKeysIn(t, own, dataDir, data, []byte(bundle)); len(found) > 0 {
			t.Errorf("the snapshot holds CA private keys in plaintext: %s", strings.Join(found, ", "))
		}
	})

	// Lose everything: stop certapi and delete its data dir.
	if err := own.StopCertapi(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	out = certapiCmd(t, "snapshot", "restore", file, "--data-dir="+dataDir)
	restoreTook := time.Since(start)
	t.Logf("snapshot restore (%s):\n%s", restoreTook.Round(time.Millisecond), out)
	// A second restore into the same dir is refused and changes nothing.
	if out, err := certapiCmdErr(t, "snapshot", "restore", file, "--data-dir="+dataDir); err == nil || !strings.Contains(out, "already holds etcd data") {
		t.Errorf("a restore over restored data: %v\n%s", err, out)
	}

	start = time.Now()
	if err := own.StartCertapi(ctx); err != nil {
		t.Fatal(err)
	}
	if err := own.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatal(err)
	}
	available := time.Since(start)
	waitLeading(t, own)
	leading := time.Since(start)
	t.Logf("restore: %s; certapi start to APIService Available: %s; to leading: %s", restoreTook.Round(time.Millisecond),
		available.Round(time.Millisecond), leading.Round(time.Millisecond))

	if got := e2etest.ActiveSerial(t, own); got != serial {
		t.Fatalf("after the restore the Active CA is %s, want %s", got, serial)
	}
	settle(t, own, c, kube, ns)
	waitReady(t, c, ns, "web", metav1.ConditionTrue, "Issued")

	after, err := kube.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != secret.ResourceVersion {
		t.Errorf("the Secret was written again after the restore: resourceVersion %s -> %s", secret.ResourceVersion, after.ResourceVersion)
	}
	vwcAfter, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if vwcAfter.ResourceVersion != vwc.ResourceVersion {
		t.Errorf("the target was injected again after the restore: resourceVersion %s -> %s", vwc.ResourceVersion, vwcAfter.ResourceVersion)
	}
	verifyAgainst(t, after, vwcAfter.Webhooks[0].ClientConfig.CABundle, "web", ns)
	if n := signatures(t, own, "secret"); n != 1 {
		t.Errorf("the restored certapi signed %v certificates for Secrets, want 1 (the canary's only)", n)
	}
}

// TestSnapshotOfUnencryptedKeysHoldsThem is the other side of the encryption check above, and shows that
// the search finds keys: without an encryption configuration the snapshot holds the CA keys in the clear.
func TestSnapshotOfUnencryptedKeysHoldsThem(t *testing.T) {
	own := framework.StartT(t, framework.Options{CertapiEmbeddedEtcd: true})
	dataDir := filepath.Join(own.Dir, "certapi-data")
	e2etest.ActiveSerial(t, own)
	c, _ := testhelpers.Clients(t, own.AdminConfig)
	bundle := e2etest.CAObject(t, c).Status.CABundle
	file := filepath.Join(t.TempDir(), "certapi.db")
	certapiCmd(t, "snapshot", "save", file, "--data-dir="+dataDir)
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	found := plaintextKeysIn(t, own, dataDir, data, []byte(bundle))
	if !slices.Contains(found, "key 0 PEM as a JSON string") || !slices.Contains(found, "key 0 PEM line 0") {
		t.Errorf("the snapshot of unencrypted CA keys does not hold the key's PEM: found %v", found)
	}
}

// plaintextKeysIn returns which of the running certapi's CA private keys, in which form, the snapshot data
// holds in plaintext. As a control it checks that a line of the CA certificate's PEM (public, in
// CertificateAuthority status, caBundle) is found in data, so that a line of a key's PEM would be too.
func plaintextKeysIn(t *testing.T, own *framework.ControlPlane, dataDir string, data, caBundle []byte) []string {
	t.Helper()
	if !bytes.Contains(data, pemLines(t, caBundle)[0]) {
		t.Fatal("control failed: the CA certificate's first PEM line is not in the snapshot, so the search proves nothing")
	}
	var found []string
	for i, k := range caPrivateKeys(t, own, dataDir) {
		for what, needle := range k {
			if bytes.Contains(data, needle) {
				found = append(found, fmt.Sprintf("key %d %s", i, what))
			}
		}
	}
	slices.Sort(found)
	return found
}

// TestNoBackupDataDirLost: certapi's data dir is lost and there is no snapshot, and certapi runs with
// --keep-published-cas, as docs/backup-and-restore.md says to start it then. The leader finds no CA
// record and creates a new CA, but keeps the CA it had published (read back from its APIService and its
// ClusterTrustBundle) as Retiring: every re-injected bundle trusts both, so the certificate still served
// from the orphaned Secret verifies against every one of them until no certificate of the lost CA can be
// valid; CertificateAuthority status (condition Recovered) and a Warning Event say what happened. Every
// ServingCertRequest is gone and their Secrets are left as they were; the same request applied again
// adopts its Secret (whose recorded UID names a request that no longer exists) and re-issues it in
// place from the new CA, with no annotation to remove.
func TestNoBackupDataDirLost(t *testing.T) {
	ctx := context.Background()
	own, dataDir := snapshotPlane(t, "--keep-published-cas")
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.SecretNamespace(t, kube)
	serial := e2etest.ActiveSerial(t, own)
	deliveredRequest(t, c, kube, ns, "web")
	target := injectionTarget(t, kube, ns)
	injectedBundle(t, kube, target, func(b []byte) bool { return holdsCA(b, serial) })
	lostReq, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := kube.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, secret)
	// certapi had published its CA in both sources the new leader reads back.
	publishedBundles(t, own, kube, func(b []byte) bool { return holdsCA(b, serial) })

	if err := own.StopCertapi(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dataDir); err != nil {
		t.Fatal(err)
	}
	if err := own.StartCertapi(ctx); err != nil {
		t.Fatal(err)
	}
	if err := own.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatal(err)
	}
	newSerial := e2etest.ActiveSerial(t, own)
	if newSerial == serial {
		t.Fatalf("with its data dir lost certapi still has CA %s Active", serial)
	}
	// The target gets the new CA's bundle, which keeps the lost CA.
	bundle := injectedBundle(t, kube, target, func(b []byte) bool { return holdsCA(b, newSerial) })
	if !holdsCA(bundle, serial) {
		t.Errorf("the target's new bundle dropped the lost CA %s", serial)
	}
	settle(t, own, c, kube, ns)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "web", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the ServingCertRequest after the data dir was lost: %v, want NotFound", err)
	}
	after, err := kube.CoreV1().Secrets(ns).Get(ctx, "web-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the delivered Secret: %v", err)
	}
	if after.ResourceVersion != secret.ResourceVersion {
		t.Errorf("the orphaned Secret was written: resourceVersion %s -> %s", secret.ResourceVersion, after.ResourceVersion)
	}

	// The certificate still served from the Secret verifies against every bundle certapi injects or
	// publishes now: the webhook configuration's, the APIService's, the ClusterTrustBundle's and status'.
	ca := e2etest.CAObject(t, c)
	bundles := map[string][]byte{"the webhook configuration": bundle, "CertificateAuthority status": []byte(ca.Status.CABundle)}
	for source, b := range publishedBundles(t, own, kube, func(b []byte) bool { return holdsCA(b, newSerial) && holdsCA(b, serial) }) {
		bundles[source] = b
	}
	for source, b := range bundles {
		if err := testhelpers.VerifyServingSecret(after, b, "web", ns); err != nil {
			t.Errorf("the old Secret's certificate does not verify against the bundle of %s: %v", source, err)
		}
	}
	// Status: the lost CA is Retiring, and the Recovered condition says so, with a time no earlier than
	// the leaf's notAfter.
	if !slices.ContainsFunc(ca.Status.Certificates, func(c certapiv1alpha1.CertificateAuthorityCertificate) bool {
		return c.SerialNumber == serial && c.Role == certapiv1alpha1.CARoleRetiring
	}) {
		t.Errorf("status.certificates %+v does not show the lost CA %s as Retiring", ca.Status.Certificates, serial)
	}
	cond := meta.FindStatusCondition(ca.Status.Conditions, certapiv1alpha1.ConditionRecovered)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != certapiv1alpha1.RecoveredReasonKeptPublishedCAs {
		t.Fatalf("condition Recovered %+v; want True, %s", cond, certapiv1alpha1.RecoveredReasonKeptPublishedCAs)
	}
	for _, want := range []string{"found no CA record", "APIService " + certapiv1alpha1.APIServiceName, "ClusterTrustBundle " + certapiv1alpha1.ClusterTrustBundleName} {
		if !strings.Contains(cond.Message, want) {
			t.Errorf("condition Recovered %q does not say %q", cond.Message, want)
		}
	}
	t.Logf("condition Recovered, reason %s: %s", cond.Reason, cond.Message)
	m := regexp.MustCompile(regexp.QuoteMeta(serial) + ` until (\S+?)[,)]`).FindStringSubmatch(cond.Message)
	if m == nil {
		t.Fatalf("condition Recovered %q does not say until when the lost CA %s stays", cond.Message, serial)
	}
	until, err := time.Parse(time.RFC3339, m[1])
	if err != nil || until.Before(leaf.NotAfter) {
		t.Errorf("the lost CA stays until %s (%v); the Secret's certificate is valid until %s", m[1], err, leaf.NotAfter)
	}
	waitCAEvents(t, kube, corev1.EventTypeWarning, certapiv1alpha1.RecoveredReasonKeptPublishedCAs)

	// The way back: the same request applied again (from Git, say) adopts its Secret, whose recorded
	// UID names the lost request, and re-issues it in place from the new CA.
	req := e2etest.Request("web", "web")
	req.Spec.SecretName = "web-tls"
	created, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.UID == lostReq.UID {
		t.Fatal("control failed: the request applied again has the lost one's UID")
	}
	ready := waitReady(t, c, ns, "web", metav1.ConditionTrue, "Issued")
	reissued := waitSecret(t, kube, ns, "web-tls", func(s *corev1.Secret) bool {
		return s.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID] == string(ready.UID)
	})
	if reissued.UID != secret.UID {
		t.Errorf("the Secret was replaced (UID %s -> %s), not re-issued in place", secret.UID, reissued.UID)
	}
	verifyAgainst(t, reissued, bundle, "web", ns)
	if got := signer.FormatSerialNumber(leafOf(t, reissued).SerialNumber); got == signer.FormatSerialNumber(leaf.SerialNumber) {
		t.Errorf("the adopted Secret still holds the lost request's certificate %s", got)
	}
	if !bytes.Equal(leafOf(t, reissued).AuthorityKeyId, activeCA(t, ca).SubjectKeyId) {
		t.Errorf("the adopted Secret's certificate is not from the new Active CA %s", newSerial)
	}
}

// leafOf parses the certificate in the Secret's tls.crt.
func leafOf(t *testing.T, s *corev1.Secret) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(s.Data["tls.crt"])
	if block == nil {
		t.Fatalf("Secret %s/%s: tls.crt holds no PEM", s.Namespace, s.Name)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// activeCA returns the Active CA's certificate from the CertificateAuthority's bundle.
func activeCA(t *testing.T, ca *certapiv1alpha1.CertificateAuthority) *x509.Certificate {
	t.Helper()
	certs, err := signer.ParseBundle([]byte(ca.Status.CABundle))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range certs {
		if ca.Status.Active != nil && signer.FormatSerialNumber(c.SerialNumber) == ca.Status.Active.SerialNumber {
			return c
		}
	}
	t.Fatalf("the bundle in status does not hold the Active CA %+v", ca.Status.Active)
	return nil
}

// publishedBundles waits until certapi's APIService and its ClusterTrustBundle both hold a bundle ok
// accepts, and returns them by source.
func publishedBundles(t *testing.T, own *framework.ControlPlane, kube kubernetes.Interface, ok func([]byte) bool) map[string][]byte {
	t.Helper()
	agg, err := aggregatorclient.NewForConfig(own.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	e2etest.Eventually(t, 60*time.Second, "the bundles of certapi's APIService and ClusterTrustBundle", func(ctx context.Context) (bool, error) {
		svc, err := agg.ApiregistrationV1().APIServices().Get(ctx, certapiv1alpha1.APIServiceName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		ctb, err := kube.CertificatesV1().ClusterTrustBundles().Get(ctx, certapiv1alpha1.ClusterTrustBundleName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		out["APIService "+certapiv1alpha1.APIServiceName] = svc.Spec.CABundle
		out["ClusterTrustBundle "+certapiv1alpha1.ClusterTrustBundleName] = []byte(ctb.Spec.TrustBundle)
		return ok(svc.Spec.CABundle) && ok([]byte(ctb.Spec.TrustBundle)), nil
	})
	return out
}

// settle waits until the leader of a (re)started certapi has worked through what it found: a request
// created now is delivered into its Secret and a target created now is injected (each controller's queue
// is first in, first out, so what was there at the start was handled before these), and the
// CertificateAuthority's injection summary has every target up to date.
func settle(t *testing.T, own *framework.ControlPlane, c versioned.Interface, kube kubernetes.Interface, ns string) {
	t.Helper()
	deliveredRequest(t, c, kube, ns, "canary")
	waitReady(t, c, ns, "canary", metav1.ConditionTrue, "Issued")
	injectionTarget(t, kube, ns+"-canary")
	e2etest.Eventually(t, 60*time.Second, "every injection target up to date", func(ctx context.Context) (bool, error) {
		ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
		if err != nil || ca.Status.Injection == nil {
			return false, nil
		}
		s := ca.Status.Injection
		return s.Targets >= 3 && s.UpToDate == s.Targets, nil // certapi's APIService, the target, the canary
	})
}

// waitLeading waits until the running certapi says on /metrics that it leads.
func waitLeading(t *testing.T, own *framework.ControlPlane) {
	t.Helper()
	e2etest.Eventually(t, 60*time.Second, "certapi to lead", func(context.Context) (bool, error) {
		return regexp.MustCompile(`(?m)^certapi_leader\{[^}]*\} 1$`).MatchString(metricsOf(t, own)), nil
	})
}

func metricsOf(t *testing.T, own *framework.ControlPlane) string {
	t.Helper()
	client, err := own.CertapiHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(own.CertapiURL + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// signatures returns certapi_signatures_total for path on the running certapi (0 when absent).
func signatures(t *testing.T, own *framework.ControlPlane, path string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^certapi_signatures_total\{path="` + path + `"\} (\S+)$`).FindStringSubmatch(metricsOf(t, own))
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// verifyAgainst fails t unless the Secret's tls.crt verifies for the Service against bundle.
func verifyAgainst(t *testing.T, s *corev1.Secret, bundle []byte, svc, ns string) {
	t.Helper()
	if err := testhelpers.VerifyServingSecret(s, bundle, svc, ns); err != nil {
		t.Fatalf("the delivered certificate does not verify against the injected bundle: %v", err)
	}
}

// caPrivateKeys reads the CA record from the running embedded etcd, decrypts it with the encryption
// configuration when there is one (the snapshot does not hold it), and returns, per CA key, the byte strings that would
// betray it in plaintext: the PEM, as text and as a JSON string (as certapi stores it), each base64 line of
// it but the public key's, the DER, and the raw private scalar.
func caPrivateKeys(t *testing.T, own *framework.ControlPlane, dataDir string) []map[string][]byte {
	t.Helper()
	ctx := context.Background()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{"unix://" + filepath.Join(dataDir, "etcd.sock")}, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	resp, err := etcd.Get(ctx, e2etest.CAKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("the CA record: %v, %d keys", err, len(resp.Kvs))
	}
	plain := resp.Kvs[0].Value
	if own.EncryptionConfigFile != "" {
		enc, err := encryptionconfig.LoadEncryptionConfig(ctx, own.EncryptionConfigFile, false, "e2e")
		if err != nil {
			t.Fatal(err)
		}
		tr := enc.Transformers[schema.GroupResource{Group: "certapi.dev", Resource: "certificateauthoritykeys"}]
		if tr == nil {
			t.Fatal("the encryption configuration has no transformer for certificateauthoritykeys.certapi.dev")
		}
		if plain, _, err = tr.TransformFromStorage(ctx, resp.Kvs[0].Value, authData(e2etest.CAKey)); err != nil {
			t.Fatalf("decrypting the CA record: %v", err)
		}
	}
	var rec struct {
		Authorities []struct {
			CertificatePEM string `json:"certificatePEM"`
			KeyPEM         string `json:"keyPEM"`
		} `json:"authorities"`
	}
	if err := json.Unmarshal(plain, &rec); err != nil {
		t.Fatal(err)
	}
	var out []map[string][]byte
	for _, a := range rec.Authorities {
		if a.KeyPEM == "" {
			continue
		}
		block, _ := pem.Decode([]byte(a.KeyPEM))
		if block == nil {
			t.Fatal("a CA key in the record is not PEM")
		}
		quoted, err := json.Marshal(a.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		k := map[string][]byte{"PEM": []byte(a.KeyPEM), "PEM as a JSON string": quoted, "DER": block.Bytes}
		for i, l := range pemLines(t, []byte(a.KeyPEM)) {
			// The key's PEM ends with its public key, which the CA certificate also holds and which can
			// fall on the same base64 line there: public, so not a needle.
			if !strings.Contains(a.CertificatePEM, string(l)) {
				k[fmt.Sprintf("PEM line %d", i)] = l
			}
		}
		if key, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
			k["private scalar"] = privateScalar(key)
		} else if ec, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
			k["private scalar"] = privateScalar(ec)
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		t.Fatal("the CA record holds no private key")
	}
	return out
}

func privateScalar(key any) []byte {
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		b, _ := k.Bytes()
		return b
	case *rsa.PrivateKey:
		return k.D.Bytes()
	}
	return nil
}

// pemLines returns the base64 lines of the first PEM block in b (those of 40 characters or more).
func pemLines(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var lines [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) >= 40 && !bytes.HasPrefix(l, []byte("-----")) {
			lines = append(lines, l)
		}
		if bytes.HasPrefix(l, []byte("-----END")) {
			break
		}
	}
	if len(lines) == 0 {
		t.Fatal("no base64 lines in the PEM")
	}
	return lines
}

// authData binds a value to its etcd key, as certapi's store does.
type authData string

func (d authData) AuthenticatedData() []byte { return []byte(d) }

// TestScheduledSnapshots runs certapi with --snapshot-interval: the leader saves snapshots into
// <data-dir>/snapshots, keeps the newest --snapshot-retention, counts them on /metrics, and each one is a
// complete snapshot that restores.
func TestScheduledSnapshots(t *testing.T) {
	own := framework.StartT(t, framework.Options{CertapiEmbeddedEtcd: true,
		CertapiArgs: []string{"--snapshot-interval=1s", "--snapshot-retention=2"}})
	dir := filepath.Join(own.Dir, "certapi-data", "snapshots")
	e2etest.Eventually(t, 60*time.Second, "three scheduled snapshots", func(context.Context) (bool, error) {
		m := regexp.MustCompile(`(?m)^certapi_snapshots_total\{result="success"\} (\d+)$`).FindStringSubmatch(metricsOf(t, own))
		if m == nil {
			return false, nil
		}
		n, err := strconv.Atoi(m[1])
		return err == nil && n >= 3, nil
	})
	if strings.Contains(metricsOf(t, own), `certapi_snapshots_total{result="failure"}`) {
		t.Error("a scheduled snapshot failed")
	}
	if !strings.Contains(metricsOf(t, own), "certapi_snapshot_last_success_timestamp_seconds ") {
		t.Error("no certapi_snapshot_last_success_timestamp_seconds on /metrics")
	}
	// The interval, for the alert on the last snapshot's age (CertapiSnapshotTooOld).
	if !regexp.MustCompile(`(?m)^certapi_snapshot_interval_seconds 1$`).MatchString(metricsOf(t, own)) {
		t.Error("no certapi_snapshot_interval_seconds 1 on /metrics (--snapshot-interval=1s)")
	}
	if err := own.StopCertapi(); err != nil {
		t.Fatal(err)
	}
	names, err := filepath.Glob(filepath.Join(dir, "certapi-*.db"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 2 {
		t.Fatalf("the snapshot dir holds %v; want the newest 2", names)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("snapshot dir: %v %v; want mode 0700", fi.Mode(), err)
	}
	out := certapiCmd(t, "snapshot", "restore", names[1], "--data-dir="+filepath.Join(t.TempDir(), "d"))
	if !strings.Contains(out, "Restored ") {
		t.Errorf("restoring a scheduled snapshot: %s", out)
	}
}

// TestSnapshotOfExternalEtcd saves a snapshot of the shared control plane's etcd (certapi's --etcd-servers)
// and finds certapi's objects in it.
func TestSnapshotOfExternalEtcd(t *testing.T) {
	file := filepath.Join(t.TempDir(), "external.db")
	out := certapiCmd(t, "snapshot", "save", file, "--etcd-servers="+cp.EtcdEndpoint)
	if !strings.Contains(out, "keys: ") {
		t.Errorf("snapshot save printed %q", out)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(e2etest.CAKey)) {
		t.Errorf("the snapshot of certapi's etcd holds no %s", e2etest.CAKey)
	}
	// Through stdout and stdin, as from a container with no shell: save -, status, restore -.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	save := exec.CommandContext(ctx, bin, "snapshot", "save", "-", "--etcd-servers="+cp.EtcdEndpoint)
	save.Stdout, save.Stderr = &stdout, &stderr
	if err := save.Run(); err != nil || !strings.Contains(stderr.String(), "trailer verified") {
		t.Fatalf("snapshot save -: %v\n%s", err, stderr.String())
	}
	streamed := filepath.Join(t.TempDir(), "streamed.db")
	if err := os.WriteFile(streamed, stdout.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := certapiCmd(t, "snapshot", "status", streamed); !strings.Contains(out, "keys: ") {
		t.Errorf("snapshot status printed %q", out)
	}
	restore := exec.CommandContext(ctx, bin, "snapshot", "restore", "-", "--data-dir="+filepath.Join(t.TempDir(), "d"))
	restore.Stdin = bytes.NewReader(stdout.Bytes())
	if out, err := restore.CombinedOutput(); err != nil || !strings.Contains(string(out), "Restored ") {
		t.Errorf("snapshot restore -: %v\n%s", err, out)
	}

	// --data-dir and --etcd-servers together are refused, and so are TLS files without --etcd-servers.
	for _, args := range [][]string{
		{"snapshot", "save", file + "2", "--etcd-servers=" + cp.EtcdEndpoint, "--data-dir=/tmp"},
		{"snapshot", "save", file + "2", "--etcd-cafile=/tmp/ca.crt"},
		{"snapshot", "save", file, "--etcd-servers=" + cp.EtcdEndpoint},
		{"snapshot", "restore", file},
		{"snapshot", "restore", file + ".missing", "--data-dir=" + t.TempDir()},
		{"snapshot", "status", file + ".missing"},
		{"snapshot", "restore", "-", "--data-dir=" + t.TempDir(), "--integrity-record-data=not base64!"},
		{"snapshot", "restore", "-", "--data-dir=" + t.TempDir(), "--integrity-record-data=e30=", "--integrity-record=" + file},
	} {
		if out, err := certapiCmdErr(t, args...); err == nil {
			t.Errorf("certapi %s succeeded: %s", strings.Join(args, " "), out)
		}
	}
}
