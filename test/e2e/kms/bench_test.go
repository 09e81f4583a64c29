package kms

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"path/filepath"
	"testing"
	"time"

	kmsapi "k8s.io/kms/apis/v2"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/test/framework"
)

// BenchmarkPluginEncryptDecrypt measures one Encrypt and one Decrypt of a 32-byte DEK seed through
// certapi-kms-pkcs11's socket, AES-GCM inside a SoftHSM2 token: what kube-apiserver or certapi pays when
// it wraps a new DEK and when it unwraps one it has not cached.
//
//	CGO_ENABLED=0 go test -trimpath -run '^$' -bench PluginEncryptDecrypt ./test/e2e/kms/
func BenchmarkPluginEncryptDecrypt(b *testing.B) {
	ctx := context.Background()
	dir, hsm := tokenDir(b, "kmsbench-")
	if _, err := hsm.CreateKey(ctx, "bench-kek"); err != nil {
		b.Fatal(err)
	}
	plugin, err := framework.StartKMSPlugin(ctx, hsm, "bench-kek", filepath.Join(dir, "kms.sock"), filepath.Join(dir, "plugin.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = plugin.Stop(10 * time.Second) })
	conn, err := plugin.Dial()
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := kmsapi.NewKeyManagementServiceClient(conn)
	seed := bytes.Repeat([]byte{0x5a}, 32)
	b.ReportAllocs()
	for b.Loop() {
		enc, err := client.Encrypt(ctx, &kmsapi.EncryptRequest{Plaintext: seed, Uid: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		dec, err := client.Decrypt(ctx, &kmsapi.DecryptRequest{Ciphertext: enc.Ciphertext, KeyId: enc.KeyId, Uid: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if !bytes.Equal(dec.Plaintext, seed) {
			b.Fatal("the round trip changed the plaintext")
		}
	}
}

// BenchmarkLeafSignature measures one serving certificate signed by an ECDSA P-256 CA whose key is in
// certapi's memory (the default) and one whose key is in a SoftHSM2 token, signed through
// certapi-kms-pkcs11's CA key socket (--ca-key-plugin): what a servingcerts create costs the leader's
// signer either way. Each signature through the plugin is one HTTP call on the Unix socket, CKM_ECDSA in
// the token, and the plugin's check of the signature.
//
//	CGO_ENABLED=0 go test -trimpath -run '^$' -bench LeafSignature ./test/e2e/kms/
func BenchmarkLeafSignature(b *testing.B) {
	ctx := context.Background()
	dir, hsm := tokenDir(b, "keybench-")
	plugin, err := framework.StartKeyPlugin(ctx, hsm, filepath.Join(dir, "keys.sock"), filepath.Join(dir, "plugin.log"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = plugin.Stop(10 * time.Second) })
	hsmKey, _, err := plugin.KeyClient().NewKey(ctx, "certapi-ca-bench")
	if err != nil {
		b.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		key  crypto.Signer
	}{
		{"in-memory", nil},
		{"softhsm-plugin", hsmKey},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local", Key: bc.key})
			if err != nil {
				b.Fatal(err)
			}
			req := signer.LeafRequest{ServiceName: "webhook", Namespace: "team-a", ClusterDomain: "cluster.local",
				PublicKey: leafKey.Public(), Duration: 168 * time.Hour}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ca.Sign(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
