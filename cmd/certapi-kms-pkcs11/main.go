// Command certapi-kms-pkcs11 keeps certapi's keys in a PKCS#11 token (an HSM, or SoftHSM2): it is a
// Kubernetes KMS v2 plugin that encrypts with an AES key held in the token, for the kms provider of
// certapi's EncryptionConfiguration (--listen), and it serves certapi's CA keys themselves, ECDSA keys
// made and used in the token, over pkg/keyplugin's protocol (--ca-key-socket). It needs cgo to load the
// PKCS#11 module: build it with CGO_ENABLED=1 (make build does). See --help.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/component-base/cli"

	"github.com/certapi/certapi/pkg/cmd/kmspkcs11cmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := cli.Run(kmspkcs11cmd.NewCommand(ctx))
	stop()
	os.Exit(code)
}
