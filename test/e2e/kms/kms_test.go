// Package kms runs certapi with its CA keys encrypted through a real KMS v2 plugin, certapi-kms-pkcs11,
// backed by a SoftHSM2 token: at rest, with the plugin killed and back, and across a key rotation in the
// token. A package of its own so that it runs beside test/e2e; it builds the plugin with cgo unless
// $CERTAPI_KMS_PKCS11_BIN names one (make build makes _output/bin/certapi-kms-pkcs11).
package kms

import (
	"bytes"
	"context"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kmstypes "k8s.io/apiserver/pkg/storage/value/encrypt/envelope/kmsv2/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// provider is the KMS provider's name in the EncryptionConfiguration; values it writes start with
// "k8s:enc:kms:v2:" + provider + ":".
const provider = "hsm"

// writeDEKLifetime is how long k8s.io/apiserver keeps writing with a DEK after the plugin last answered
// Status (kmsv2PluginWriteDEKSourceMaxTTL in k8s.io/apiserver's encryptionconfig).
const writeDEKLifetime = 3 * time.Minute

// TestCAKeysUnderKMS: certapi's CA record is encrypted by certapi-kms-pkcs11 with an AES key in a SoftHSM2
// token. (a) At rest it is a KMS v2 envelope under the token key's ID with no PEM in it. (b) certapi
// issues. (c) With the plugin killed, certapi goes on issuing with the CA it holds, stays ready, says so
// on /healthz, in metrics and in its log, and once its write DEK has expired a CA rotation fails to store
// the Next CA instead of writing it in the clear: the record is untouched and the old CA keeps signing.
// (d) With the plugin back, the rotation goes through, encrypted. (e) After a rotation to a new key in the
// token and a restart of the plugin and certapi, the record still decrypts (same CA) and is rewritten
// under the new key's ID.
func TestCAKeysUnderKMS(t *testing.T) {
	ctx := context.Background()
	dir, hsm := tokenDir(t, "kms-")
	keyID1, err := hsm.CreateKey(ctx, "certapi-kek-1")
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "kms.sock")
	pluginLog := filepath.Join(dir, "certapi-kms-pkcs11.log")
	plugin := startPlugin(t, hsm, "certapi-kek-1", socket, pluginLog)

	config, err := testhelpers.KMSv2EncryptionConfig(provider, "unix://"+socket, 3*time.Second, "certificateauthoritykeys.certapi.dev")
	if err != nil {
		t.Fatal(err)
	}
	own := framework.StartT(t, framework.Options{Dir: filepath.Join(dir, "cp"), EncryptionConfig: config})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	serial := e2etest.ActiveSerial(t, own)
	if !logContains(t, own.Logs()["certapi"], "CA private keys are encrypted at rest") {
		t.Error("certapi did not say the CA keys are encrypted")
	}
	certapiHTTP, err := own.CertapiHTTPClient()
	if err != nil {
		t.Fatal(err)
	}

	// (a) At rest: an envelope of the provider, under the key in the token.
	raw, _ := caRecord(t, own)
	if got := envelopeKeyID(t, raw); got != keyID1 {
		t.Fatalf("the CA record is stored under key ID %q, want the token key's %q", got, keyID1)
	}

	// (b) certapi issues.
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("kms", "kms"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e2etest.IssuedBy(t, c, ns, "kms", serial)

	// (c) The plugin killed.
	if err := plugin.Kill(); err != nil {
		t.Fatal(err)
	}
	e2etest.IssuedBy(t, c, ns, "kms", serial)
	e2etest.Eventually(t, time.Minute, "/healthz/kms-providers to fail", func(ctx context.Context) (bool, error) {
		code, _ := get(ctx, certapiHTTP, own.CertapiURL+"/healthz/kms-providers")
		return code == http.StatusInternalServerError, nil
	})
	for _, path := range []string{"/readyz", "/livez"} {
		if code, body := get(ctx, certapiHTTP, own.CertapiURL+path+"?verbose"); code != http.StatusOK || strings.Contains(body, "kms-provider") {
			t.Errorf("%s with the plugin down: %d, want 200 without a KMS check:\n%s", path, code, body)
		}
	}
	if err := own.WaitAPIServiceAvailable(ctx); err != nil {
		t.Errorf("the APIService with the plugin down: %v", err)
	}
	e2etest.Eventually(t, 3*time.Minute, "certapi's log and metrics to say the plugin is down", func(ctx context.Context) (bool, error) {
		body := scrape(ctx, t, certapiHTTP, own)
		status := []string{`provider_name="` + provider + `"`, `method_name="/v2.KeyManagementService/Status"`}
		all := metricSum(body, "apiserver_envelope_encryption_kms_operations_latency_seconds_count", status...)
		ok := metricSum(body, "apiserver_envelope_encryption_kms_operations_latency_seconds_count", append(status, `grpc_status_code="OK"`)...)
		return all > ok && logContains(t, own.Logs()["certapi"], "WARNING: the KMS plugin does not answer"), nil
	})
	t.Logf("certapi says: %.400s", lastLine(t, own.Logs()["certapi"], "WARNING: the KMS plugin does not answer"))

	// Until k8s.io/apiserver's write DEK expires, writes still go through, encrypted under it. After that a
	// CA write needs the plugin.
	e2etest.Eventually(t, writeDEKLifetime+time.Minute, "certapi's write DEK to expire", func(ctx context.Context) (bool, error) {
		times := series(scrape(ctx, t, certapiHTTP, own), "apiserver_envelope_encryption_key_id_hash_status_last_timestamp_seconds", `provider_name="`+provider+`"`)
		if len(times) == 0 {
			return false, nil // a scrape that failed
		}
		last := slices.Max(times)
		return time.Since(time.Unix(int64(last), 0)) > writeDEKLifetime+5*time.Second, nil
	})
	before, beforeRev := caRecord(t, own)
	failedWrites := logCount(t, own.Logs()["certapi"], "persisting rotation step")
	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.ForceRotation = "kms-down" })
	e2etest.Eventually(t, time.Minute, "the rotation's CA write to fail", func(context.Context) (bool, error) {
		return logCount(t, own.Logs()["certapi"], "persisting rotation step") > failedWrites, nil
	})
	t.Logf("with the plugin down, the CA write failed: %.400s", lastLine(t, own.Logs()["certapi"], "persisting rotation step"))
	e2etest.IssuedBy(t, c, ns, "kms", serial)
	if after, afterRev := caRecord(t, own); afterRev != beforeRev || !bytes.Equal(after, before) {
		t.Fatalf("the CA record changed while the plugin was down (revision %d -> %d)", beforeRev, afterRev)
	}
	if roles := caRoles(t, c); roles != "Active" {
		t.Fatalf("with the plugin down the CAs are %s, want only the Active one", roles)
	}

	// (d) The plugin back: the rotation goes through, encrypted.
	plugin = startPlugin(t, hsm, "certapi-kek-1", socket, pluginLog)
	e2etest.Eventually(t, 4*time.Minute, "the Next CA to be published", func(context.Context) (bool, error) {
		return caRoles(t, c) == "Active,Next", nil
	})
	raw, rev := caRecord(t, own)
	if rev == beforeRev {
		t.Fatal("the Next CA was published but the CA record was not written")
	}
	if got := envelopeKeyID(t, raw); got != keyID1 {
		t.Fatalf("the CA record is stored under key ID %q, want %q", got, keyID1)
	}
	e2etest.IssuedBy(t, c, ns, "kms", serial)
	e2etest.Eventually(t, 3*time.Minute, "/healthz/kms-providers and certapi's log to say the plugin is back", func(ctx context.Context) (bool, error) {
		code, _ := get(ctx, certapiHTTP, own.CertapiURL+"/healthz/kms-providers")
		return code == http.StatusOK && logContains(t, own.Logs()["certapi"], "The KMS plugin answers again"), nil
	})

	// (e) A new key in the token; the plugin and certapi restarted on it.
	keyID2, err := hsm.CreateKey(ctx, "certapi-kek-2")
	if err != nil {
		t.Fatal(err)
	}
	if keyID2 == keyID1 {
		t.Fatal("two keys have one key ID")
	}
	if err := plugin.Stop(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	startPlugin(t, hsm, "certapi-kek-2", socket, pluginLog)
	if err := own.StopCertapi(); err != nil {
		t.Fatal(err)
	}
	if err := own.StartCertapi(ctx); err != nil {
		t.Fatal(err)
	}
	if err := own.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e2etest.ActiveSerial(t, own); got != serial {
		t.Fatalf("after the key rotation certapi's Active CA is %s, want %s", got, serial)
	}
	e2etest.IssuedBy(t, c, ns, "kms", serial)
	e2etest.Eventually(t, time.Minute, "the CA record to be rewritten under the new key", func(context.Context) (bool, error) {
		raw, _ := caRecord(t, own)
		return envelopeKeyID(t, raw) == keyID2, nil
	})
	if roles := caRoles(t, c); roles != "Active,Next" {
		t.Fatalf("after the key rotation the CAs are %s, want Active,Next as before", roles)
	}
	if data, err := os.ReadFile(pluginLog); err != nil || bytes.Contains(data, []byte("PRIVATE KEY")) {
		t.Errorf("the plugin's log (%v) holds key material", err)
	}
}

// startPlugin starts certapi-kms-pkcs11 on socket for the key labelled keyLabel, stopped at the end of the
// test.
func startPlugin(t *testing.T, hsm *framework.SoftHSM, keyLabel, socket, logPath string) *framework.KMSPlugin {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a cold cgo build included
	defer cancel()
	plugin, err := framework.StartKMSPlugin(ctx, hsm, keyLabel, socket, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plugin.Stop(10 * time.Second) })
	return plugin
}

// caRecord returns the raw etcd value of the CA record and its modification revision.
func caRecord(t *testing.T, own *framework.ControlPlane) ([]byte, int64) {
	t.Helper()
	etcd, err := own.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	resp, err := etcd.Get(context.Background(), e2etest.CAKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("CA record: %v, %d keys", err, len(resp.Kvs))
	}
	return resp.Kvs[0].Value, resp.Kvs[0].ModRevision
}

// envelopeKeyID checks that raw is a KMS v2 envelope of the provider with no PEM in it and returns the
// key ID it is stored under.
func envelopeKeyID(t *testing.T, raw []byte) string {
	t.Helper()
	prefix := []byte("k8s:enc:kms:v2:" + provider + ":")
	if !bytes.HasPrefix(raw, prefix) {
		t.Fatalf("the CA record is not a KMS v2 envelope of provider %s: starts %q", provider, raw[:min(len(raw), len(prefix))])
	}
	if bytes.Contains(raw, []byte("PRIVATE KEY")) || bytes.Contains(raw, []byte("BEGIN")) {
		t.Fatal("the encrypted CA record contains PEM")
	}
	var obj kmstypes.EncryptedObject
	if err := proto.Unmarshal(raw[len(prefix):], &obj); err != nil {
		t.Fatalf("the CA record's envelope: %v", err)
	}
	if len(obj.EncryptedData) == 0 || len(obj.EncryptedDEKSource) == 0 {
		t.Fatal("the CA record's envelope has no data or no encrypted DEK")
	}
	return obj.KeyID
}

// caRoles lists the roles of CertificateAuthority/default's CAs, comma-separated.
func caRoles(t *testing.T, c versioned.Interface) string {
	t.Helper()
	var roles []string
	for _, cert := range e2etest.CAObject(t, c).Status.Certificates {
		roles = append(roles, string(cert.Role))
	}
	return strings.Join(roles, ",")
}

// get GETs url and returns the status code and body (0 and the error's text when it fails).
func get(ctx context.Context, client *http.Client, url string) (int, string) {
	body, code, err := framework.HTTPGet(ctx, client, url)
	if err != nil {
		return 0, err.Error()
	}
	return code, body
}

// scrape returns certapi's /metrics.
func scrape(ctx context.Context, t *testing.T, client *http.Client, own *framework.ControlPlane) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, own.CertapiURL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// series returns the values of the series of name whose labels contain every one of labels.
func series(body, name string, labels ...string) []float64 {
	var values []float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			continue
		}
		matches := true
		for _, l := range labels {
			matches = matches && strings.Contains(line[:end], l)
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64); matches && err == nil && !math.IsNaN(v) {
			values = append(values, v)
		}
	}
	return values
}

// metricSum is the sum of series(body, name, labels...).
func metricSum(body, name string, labels ...string) float64 {
	sum := 0.0
	for _, v := range series(body, name, labels...) {
		sum += v
	}
	return sum
}

// logContains reports whether the log file at path contains s.
func logContains(t *testing.T, path, s string) bool {
	t.Helper()
	return logCount(t, path, s) > 0
}

// lastLine returns the last line of the log file at path that contains s.
func lastLine(t *testing.T, path, s string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	lines := strings.Split(string(data), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], s) {
			return lines[i]
		}
	}
	return ""
}

// logCount counts the occurrences of s in the log file at path.
func logCount(t *testing.T, path, s string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return bytes.Count(data, []byte(s))
}

// tokenDir makes a directory for one test, with a SoftHSM2 token labelled certapi in it, removed at the end
// of a test that passed and kept, with the plugins' and the control plane's logs, after one that failed.
// Its path is short: the plugins' Unix sockets in it must fit in 108 bytes.
func tokenDir(t testing.TB, prefix string) (string, *framework.SoftHSM) {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			_ = os.RemoveAll(dir)
		} else {
			t.Logf("the token, the plugins' logs and the control plane are kept in %s", dir)
		}
	})
	hsm, err := framework.NewSoftHSM(context.Background(), filepath.Join(dir, "hsm"), "certapi")
	if err != nil {
		t.Fatal(err)
	}
	return dir, hsm
}
