package kms

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	kmsapi "k8s.io/kms/apis/v2"

	"github.com/certapi/certapi/test/framework"
)

// BenchmarkPluginEncryptDecrypt measures one Encrypt and one Decrypt of a 32-byte DEK seed through
// certapi-kms-pkcs11's socket, AES-GCM inside a SoftHSM2 token: what kube-apiserver or certapi pays when
// it wraps a new DEK and when it unwraps one it has not cached.
//
//	CGO_ENABLED=0 go test -trimpath -run '^$' -bench PluginEncryptDecrypt ./test/e2e/kms/
func BenchmarkPluginEncryptDecrypt(b *testing.B) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "kmsbench-") // short: the socket's path must fit in 108 bytes
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	hsm, err := framework.NewSoftHSM(ctx, filepath.Join(dir, "hsm"), "bench")
	if err != nil {
		b.Fatal(err)
	}
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
