package kms

import (
	"context"
	"crypto/elliptic"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestCAKeysInTheToken runs two certapi replicas with --ca-key-plugin, each with its own certapi-kms-pkcs11
// serving the CA keys of one SoftHSM2 token. (a) The CA record holds the key's reference and no key
// material, and the token holds that key. (b) certapi issues. (c) With the leader's plugin killed, a
// servingcerts call is answered 503 with Retry-After, the leader counts the failed signature, and with the
// plugin back certapi issues with the same CA. (d) The leader killed, the other replica signs with the same
// key through its own plugin. (e) A rotation makes the Next key in the token and destroys the old Active
// one at the switch; (f) a distrust does the same at once. Nothing logs key material.
func TestCAKeysInTheToken(t *testing.T) {
	ctx := context.Background()
	dir, hsm := tokenDir(t, "hsmkeys-")
	const replicas = 2
	var plugins [replicas]*framework.KMSPlugin
	for i := range replicas {
		plugins[i] = startKeyPlugin(t, hsm, filepath.Join(dir, fmt.Sprintf("keys-%d.sock", i)), filepath.Join(dir, fmt.Sprintf("plugin-%d.log", i)))
	}
	own := framework.StartT(t, framework.Options{
		Dir:             filepath.Join(dir, "cp"),
		CertapiReplicas: replicas,
		CertapiReplicaArgs: func(i int) []string {
			return append(framework.LeaderIdentityArgs(i), "--ca-key-plugin="+plugins[i].CAKeySocket)
		},
		// A short grace lets the rotation switch within the test. Certificates live long enough for certapi's
		// own serving certificate to outlast the plugin's outage below: while the token cannot sign, nothing is
		// renewed, that certificate included.
		CertapiArgs: []string{"--rotation-grace=2s", "--max-certificate-duration=10m"},
	})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	serial := e2etest.ActiveSerial(t, own)

	// (a) The record names the key; the token holds it.
	ref := activeKeyRef(t, own)
	tokenKeysAre(t, plugins[0], ref)

	// (b) certapi issues.
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, e2etest.Request("kms", "kms"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e2etest.IssuedBy(t, c, ns, "kms", serial)

	// (c) The leader's plugin killed: 503 with Retry-After, counted; back, the same CA signs.
	leader := waitLeader(t, own)
	if err := plugins[leader].Kill(); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, time.Minute, "a servingcerts call to be answered 503 with Retry-After", func(ctx context.Context) (bool, error) {
		err := createServingCertOnce(ctx, t, c, ns)
		status, ok := err.(apierrors.APIStatus)
		if !ok || !apierrors.IsServiceUnavailable(err) {
			return false, nil // not yet: a request answered before the kill, or the proxy's own error
		}
		details := status.Status().Details
		if details == nil || details.RetryAfterSeconds <= 0 {
			t.Fatalf("503 without Retry-After: %v", err)
		}
		if !strings.Contains(err.Error(), "CA key is unavailable") {
			t.Fatalf("the 503 does not say the CA key is unavailable: %v", err)
		}
		return true, nil
	})
	client, err := own.CertapiHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 30*time.Second, "the leader to count the signature the token could not make", func(ctx context.Context) (bool, error) {
		body := scrapeURL(ctx, client, own.CertapiReplicaURL(leader)+"/metrics")
		return metricSum(body, "certapi_ca_key_operations_total", `operation="sign"`, `result="unavailable"`) > 0, nil
	})
	if err := plugins[leader].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e2etest.IssuedBy(t, c, ns, "kms", serial)

	// (d) The leader killed: the other replica signs with the same key, through its own plugin.
	if err := own.KillReplica(leader); err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, time.Minute, "the other replica to lead", func(context.Context) (bool, error) {
		return e2etest.LeaderOf(t, own) == 1-leader, nil
	})
	e2etest.IssuedBy(t, c, ns, "kms", serial)
	if err := own.StartReplica(ctx, leader); err != nil {
		t.Fatal(err)
	}

	// (e) A rotation: the Next key is made in the token, the old Active key destroyed at the switch.
	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.ForceRotation = "hsm-1" })
	rotated := waitNewActive(t, c, serial)
	newRef := activeKeyRef(t, own)
	if newRef == ref {
		t.Fatalf("after the rotation the Active CA still has the key %s", ref)
	}
	tokenKeysAre(t, plugins[0], newRef)
	e2etest.IssuedBy(t, c, ns, "kms", rotated)

	// (f) A distrust: a new CA at once, and the distrusted CA's key destroyed.
	e2etest.UpdateCA(t, c, func(ca *certapiv1alpha1.CertificateAuthority) { ca.Spec.Distrust = "hsm-drill" })
	replaced := waitNewActive(t, c, rotated)
	lastRef := activeKeyRef(t, own)
	if lastRef == newRef {
		t.Fatalf("after the distrust the Active CA still has the key %s", newRef)
	}
	tokenKeysAre(t, plugins[1-leader], lastRef)
	e2etest.IssuedBy(t, c, ns, "kms", replaced)

	logs := slices.Collect(maps.Values(own.Logs()))
	for i := range replicas {
		logs = append(logs, filepath.Join(dir, fmt.Sprintf("plugin-%d.log", i)))
	}
	for _, path := range logs {
		if data, err := os.ReadFile(path); err == nil && strings.Contains(string(data), "PRIVATE KEY") {
			t.Errorf("%s holds key material", path)
		}
	}
}

// startKeyPlugin starts certapi-kms-pkcs11 serving only the CA keys of hsm's token on socket, stopped at the
// end of the test.
func startKeyPlugin(t *testing.T, hsm *framework.SoftHSM, socket, logPath string) *framework.KMSPlugin {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a cold cgo build included
	defer cancel()
	plugin, err := framework.StartKeyPlugin(ctx, hsm, socket, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plugin.Stop(10 * time.Second) })
	return plugin
}

// activeKeyRef returns the key reference of the Active CA in the stored CA record (unencrypted here),
// and checks that the record holds no key material.
func activeKeyRef(t *testing.T, own *framework.ControlPlane) string {
	t.Helper()
	raw, _ := caRecord(t, own)
	if strings.Contains(string(raw), "PRIVATE KEY") || strings.Contains(string(raw), `"keyPEM"`) {
		t.Fatal("the CA record of keys held in the token holds key material")
	}
	var rec struct {
		Authorities []struct {
			Role   string `json:"role"`
			KeyRef string `json:"keyRef"`
		} `json:"authorities"`
	}
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatalf("decoding the CA record: %v", err)
	}
	for _, a := range rec.Authorities {
		if a.Role == issuer.RoleActive {
			if a.KeyRef == "" {
				t.Fatal("the Active CA's entry in the record names no key in the token")
			}
			return a.KeyRef
		}
	}
	t.Fatal("the CA record has no Active CA")
	return ""
}

// tokenKeysAre waits until the token's certapi CA keys, listed through plugin, are exactly refs.
func tokenKeysAre(t *testing.T, plugin *framework.KMSPlugin, refs ...string) {
	t.Helper()
	var got []string
	e2etest.Eventually(t, 30*time.Second, fmt.Sprintf("the token's CA keys to be %v", refs), func(ctx context.Context) (bool, error) {
		keys, err := plugin.ListCAKeys(ctx, issuer.CAKeyLabelPrefix)
		if err != nil {
			return false, nil
		}
		got = got[:0]
		for _, k := range keys {
			got = append(got, k.Ref)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(refs))
		return slices.Equal(got, want), nil
	})
}

// waitLeader waits until one replica says it leads and returns it.
func waitLeader(t *testing.T, own *framework.ControlPlane) int {
	t.Helper()
	leader := -1
	e2etest.Eventually(t, time.Minute, "a leader", func(context.Context) (bool, error) {
		leader = e2etest.LeaderOf(t, own)
		return leader >= 0, nil
	})
	return leader
}

// waitNewActive waits until CertificateAuthority/default's Active CA is another than old and no other CA
// is left but a Retiring one, and returns its serial.
func waitNewActive(t *testing.T, c versioned.Interface, old string) string {
	t.Helper()
	var serial string
	e2etest.Eventually(t, time.Minute, "a new Active CA in place of "+old, func(context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		if ca.Status.Active == nil || ca.Status.Active.SerialNumber == old {
			return false, nil
		}
		for _, cert := range ca.Status.Certificates {
			if cert.Role == certapiv1alpha1.CARoleNext {
				return false, nil
			}
		}
		serial = ca.Status.Active.SerialNumber
		return true, nil
	})
	return serial
}

// createServingCertOnce calls servingcerts once for the request "kms" in ns, without client-go's retries
// of a 503 with Retry-After, and returns the error.
func createServingCertOnce(ctx context.Context, t *testing.T, c versioned.Interface, ns string) error {
	t.Helper()
	body := e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return c.CertapiV1alpha1().RESTClient().Post().Namespace(ns).Resource("servingcertrequests").Name("kms").
		SubResource("servingcerts").Body(body).MaxRetries(0).Do(ctx).Error()
}

// scrapeURL returns the whole body of the metrics at url, empty when it cannot be read.
func scrapeURL(ctx context.Context, client *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return ""
	}
	resp, err := client.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}
