package e2e

import (
	"bytes"
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// sameCA reports whether the bundle's first certificate has the given serial number.
func sameCA(t *testing.T, bundle, serial string) bool {
	t.Helper()
	block, _ := pem.Decode([]byte(bundle))
	if block == nil {
		t.Fatal("empty bundle")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return signer.FormatSerialNumber(ca.SerialNumber) == serial
}

// TestCAKeysEncryptedAtRest runs certapi with an EncryptionConfiguration that lists the CA key resource:
// the raw etcd value is ciphertext with no PEM in it, and a restarted certapi signs with the same CA.
func TestCAKeysEncryptedAtRest(t *testing.T) {
	config, err := testhelpers.AESCBCEncryptionConfig("certificateauthoritykeys.certapi.dev")
	if err != nil {
		t.Fatal(err)
	}
	own := framework.StartT(t, framework.Options{EncryptionConfig: config})
	serial := e2etest.ActiveSerial(t, own)

	etcd, err := own.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	resp, err := etcd.Get(context.Background(), e2etest.CAKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("CA record: %v, %d keys", err, len(resp.Kvs))
	}
	raw := resp.Kvs[0].Value
	if !bytes.HasPrefix(raw, []byte("k8s:enc:aescbc:v1:key1:")) {
		t.Fatalf("the CA record is not encrypted: starts %q", raw[:min(len(raw), 24)])
	}
	if bytes.Contains(raw, []byte("PRIVATE KEY")) || bytes.Contains(raw, []byte("BEGIN")) {
		t.Fatal("the encrypted CA record contains PEM")
	}
	if !logContains(t, own.Logs()["certapi"], "CA private keys are encrypted at rest") {
		t.Error("certapi did not say the CA keys are encrypted")
	}

	if err := own.StopCertapi(); err != nil {
		t.Fatal(err)
	}
	if err := own.StartCertapi(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := own.WaitAPIServiceAvailable(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e2etest.ActiveSerial(t, own); got != serial {
		t.Fatalf("after a restart the CA is %s, want %s", got, serial)
	}
	// It still signs with it.
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), e2etest.Request("enc", "enc"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out := issueOn(t, own, ns, "enc", e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil))
	if !sameCA(t, out.Status.CABundle, serial) {
		t.Fatal("the certificate after the restart is not from the same CA")
	}
}

// TestUnencryptedWarning: without an EncryptionConfiguration certapi says loudly that the keys are stored
// in the clear.
func TestUnencryptedWarning(t *testing.T) {
	if !logContains(t, cp.Logs()["certapi"], "the CA private keys are stored in etcd UNENCRYPTED") {
		t.Fatal("no warning about unencrypted CA keys in certapi's log")
	}
}

// TestRequireEncryptedCAKeys: with --require-encrypted-ca-keys certapi refuses to start, with a message
// that names the resource to list, when the CA keys would be stored unencrypted: no encryption
// configuration, one that does not list the resource, one that lists identity first.
func TestRequireEncryptedCAKeys(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// An identity with no rights at all: were certapi to start anyway, it could change nothing in the shared
	// control plane. It needs none to get as far as the check (no in-cluster authentication lookup).
	nobody, err := cp.UserConfig("e2e-require-encrypted")
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "reqenc-") // short: the embedded etcd's sockets live in it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	kubeconfig := filepath.Join(dir, "kubeconfig")
	e2etest.WriteKubeconfig(t, kubeconfig, nobody)
	secretsOnly, err := testhelpers.AESCBCEncryptionConfig("secrets")
	if err != nil {
		t.Fatal(err)
	}
	listed, err := testhelpers.AESCBCEncryptionConfig("certificateauthoritykeys.certapi.dev")
	if err != nil {
		t.Fatal(err)
	}
	identityFirst := strings.Replace(listed, "  providers:\n", "  providers:\n  - identity: {}\n", 1)
	for _, tc := range []struct {
		name, config, why string
	}{
		{"no encryption configuration", "", "no --encryption-provider-config is given"},
		{"the resource is not listed", secretsOnly, "does not list the resource"},
		{"identity first", identityFirst, "lists the identity provider first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			args := []string{
				"--require-encrypted-ca-keys",
				"--data-dir=" + filepath.Join(sub, "data"),
				"--bind-address=127.0.0.1",
				fmt.Sprintf("--secure-port=%d", e2etest.FreePort(t)),
				"--kubeconfig=" + kubeconfig,
				"--authentication-kubeconfig=" + kubeconfig,
				"--authorization-kubeconfig=" + kubeconfig,
				"--authentication-skip-lookup",
			}
			if tc.config != "" {
				if err := os.MkdirAll(sub, 0o700); err != nil {
					t.Fatal(err)
				}
				file := filepath.Join(sub, "encryption.yaml")
				if err := os.WriteFile(file, []byte(tc.config), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--encryption-provider-config="+file)
			}
			runCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			out, err := exec.CommandContext(runCtx, bin, args...).CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() <= 0 {
				t.Fatalf("certapi: %v; want it to refuse to start (exit non-zero)\n%s", err, e2etest.Tail(string(out), 30))
			}
			for _, want := range []string{"--require-encrypted-ca-keys", "certificateauthoritykeys.certapi.dev", tc.why} {
				if !strings.Contains(string(out), want) {
					t.Errorf("certapi's output does not say %q:\n%s", want, e2etest.Tail(string(out), 30))
				}
			}
		})
	}
}

// TestPlantedPlaintextCARecordIsRefused: with an EncryptionConfiguration that lists identity after the
// encrypting provider (as while migrating to encryption), a plaintext CA record written straight into
// etcd, as whoever can write there or craft a snapshot could, is not loaded: certapi says why, signs
// nothing with the planted CA, and leaves the record as it found it.
func TestPlantedPlaintextCARecordIsRefused(t *testing.T) {
	config, err := testhelpers.AESCBCEncryptionConfig("certificateauthoritykeys.certapi.dev")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(config, "identity") {
		t.Fatal("the test's EncryptionConfiguration must list identity after the encrypting provider")
	}
	own := framework.StartT(t, framework.Options{EncryptionConfig: config})
	e2etest.ActiveSerial(t, own)
	if err := own.StopCertapi(); err != nil {
		t.Fatal(err)
	}

	planted, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local", CommonName: "planted"})
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := planted.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	record, err := json.Marshal(map[string]any{"apiVersion": "certapi.dev/internal", "kind": "CertificateAuthorityKeys",
		"authorities": []map[string]string{{"role": "Active", "certificatePEM": string(planted.CertificatePEM()), "keyPEM": string(keyPEM)}}})
	if err != nil {
		t.Fatal(err)
	}
	etcd, err := own.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	ctx := context.Background()
	if _, err := etcd.Put(ctx, e2etest.CAKey, string(record)); err != nil {
		t.Fatal(err)
	}

	// certapi never becomes ready without a CA: start it in the background and wait for what it says.
	startCtx, stopWaiting := context.WithCancel(ctx)
	started := make(chan error, 1)
	go func() { started <- own.StartCertapi(startCtx) }()
	e2etest.Eventually(t, 90*time.Second, "certapi to refuse the unencrypted CA record", func(context.Context) (bool, error) {
		if logContains(t, own.Logs()["certapi"], "Loaded the CA from etcd") {
			return false, errors.New("certapi loaded the planted CA record")
		}
		return logContains(t, own.Logs()["certapi"], "the CA record in etcd is stored unencrypted while the encryption configuration encrypts the CA keys"), nil
	})
	stopWaiting()
	if err := <-started; err == nil {
		t.Fatal("certapi became ready with a planted, unencrypted CA record")
	}
	resp, err := etcd.Get(ctx, e2etest.CAKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("CA record: %v, %d keys", err, len(resp.Kvs))
	}
	if !bytes.Equal(resp.Kvs[0].Value, record) {
		t.Fatal("the planted record was rewritten; want it left for a person to look at")
	}
}
