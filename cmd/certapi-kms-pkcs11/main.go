// Command certapi-kms-pkcs11 is a Kubernetes KMS v2 plugin that encrypts with an AES key held in a PKCS#11
// token (an HSM, or SoftHSM2), for the kms provider of certapi's EncryptionConfiguration. It needs cgo to
// load the PKCS#11 module: build it with CGO_ENABLED=1 (make build does). See --help.
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
