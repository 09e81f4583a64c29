package kms

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/keyplugin"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/test/framework"
)

// TestCAKeyPlugin runs certapi-kms-pkcs11 with only --ca-key-socket on a SoftHSM2 token, and drives it
// as certapi's issuer will: a CA made with a key in the token, the plugin killed (signing fails with
// signer.ErrKeyUnavailable, never with another key), paused (the same, within the client's timeout),
// restarted (the same key signs again from its reference and the CA's public key), the key listed by label
// and destroyed.
func TestCAKeyPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // a cold cgo build included
	defer cancel()
	dir, err := os.MkdirTemp("", "cakeys-") // short: the socket's path must fit in 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	hsm, err := framework.NewSoftHSM(ctx, filepath.Join(dir, "hsm"), "certapi-ca")
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "plugin.log")
	plugin, err := framework.StartKeyPlugin(ctx, hsm, filepath.Join(dir, "ca-keys.sock"), logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = plugin.Stop(10 * time.Second) })
	if plugin.Socket != "" {
		t.Fatalf("a key plugin alone serves the KMS v2 API on %q", plugin.Socket)
	}
	info, err := os.Stat(plugin.CAKeySocket)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("the CA key socket's mode is %o, want 600", perm)
	}

	client := plugin.KeyClient()
	key, ref, err := client.NewKey(ctx, "certapi-ca-e2e-1")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local", Key: key})
	if err != nil {
		t.Fatalf("NewCA with the token's key: %v", err)
	}
	if err := ca.Certificate.CheckSignatureFrom(ca.Certificate); err != nil {
		t.Fatalf("the CA's self-signature does not verify: %v", err)
	}
	keys, err := plugin.ListCAKeys(ctx, "certapi-ca-e2e-")
	if err != nil || len(keys) != 1 || keys[0] != (keyplugin.KeyInfo{Ref: ref, Label: "certapi-ca-e2e-1"}) {
		t.Fatalf("ListCAKeys = %v, %v; want the one key %s", keys, err, ref)
	}

	digest := sha256.Sum256([]byte("tbs"))
	sign := func(c *keyplugin.Client) error {
		_, err := c.Key(ref, ca.Certificate.PublicKey).Sign(nil, digest[:], crypto.SHA256)
		return err
	}

	if err := plugin.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := sign(client); !errors.Is(err, signer.ErrKeyUnavailable) {
		t.Errorf("Sign with the plugin killed: %v; want signer.ErrKeyUnavailable", err)
	}
	if err := client.Check(ctx); !errors.Is(err, signer.ErrKeyUnavailable) {
		t.Errorf("Check with the plugin killed: %v; want signer.ErrKeyUnavailable", err)
	}
	if err := plugin.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sign(client); err != nil {
		t.Fatalf("Sign after the restart, from the reference and the CA's public key: %v", err)
	}

	if err := plugin.Pause(); err != nil {
		t.Fatal(err)
	}
	err = sign(keyplugin.NewClient(plugin.CAKeySocket, time.Second))
	if rerr := plugin.Resume(); rerr != nil {
		t.Fatal(rerr)
	}
	if !errors.Is(err, signer.ErrKeyUnavailable) {
		t.Errorf("Sign with the plugin paused: %v; want signer.ErrKeyUnavailable", err)
	}
	if err := sign(client); err != nil {
		t.Fatalf("Sign once the plugin resumed: %v", err)
	}

	if err := client.Destroy(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if err := client.Destroy(ctx, ref); err != nil {
		t.Errorf("Destroy again: %v; want nil (already gone)", err)
	}
	if err := sign(client); !errors.Is(err, keyplugin.ErrNotFound) || errors.Is(err, signer.ErrKeyUnavailable) {
		t.Errorf("Sign after Destroy: %v; want keyplugin.ErrNotFound", err)
	}
	if keys, err := plugin.ListCAKeys(ctx, "certapi-ca-e2e-"); err != nil || len(keys) != 0 {
		t.Errorf("ListCAKeys after Destroy = %v, %v; want none", keys, err)
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"Destroyed a CA key"`)) || bytes.Contains(data, []byte("PRIVATE KEY")) {
		t.Errorf("the plugin's log does not say it destroyed the key, or holds key material:\n%s", data)
	}
}
