package e2e

import (
	"bytes"
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/test/framework"
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
	config, err := framework.AESCBCEncryptionConfig("certificateauthoritykeys.certapi.dev")
	if err != nil {
		t.Fatal(err)
	}
	own := framework.StartT(t, framework.Options{EncryptionConfig: config})
	serial := activeSerial(t, own)

	etcd, err := own.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	resp, err := etcd.Get(context.Background(), caKey)
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
	if got := activeSerial(t, own); got != serial {
		t.Fatalf("after a restart the CA is %s, want %s", got, serial)
	}
	// It still signs with it.
	c, kube := clients(t, own.AdminConfig)
	ns := namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), request("enc", "enc"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out := issueOn(t, own, ns, "enc", servingCert(csrPEM(t, ecKey(t, elliptic.P256())), nil))
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
