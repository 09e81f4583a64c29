// Command kubectl-certapi is the kubectl plugin behind `kubectl certapi`: with the binary on PATH, kubectl
// runs it for `kubectl certapi status|check|rotate|distrust|inspect`. See `kubectl certapi --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/component-base/cli"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"

	"github.com/certapi/certapi/pkg/cmd/kubectlcertapi"
	"github.com/certapi/certapi/pkg/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := kubectlcertapi.NewCmd(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	cmd.SetContext(ctx)
	// --version, as cobra adds it when Version is set.
	cmd.Version = version.String("kubectl-certapi")
	cmd.SetVersionTemplate("{{.Version}}\n")
	err := cli.RunNoErrOutput(cmd)
	stop()
	cmdutil.CheckErr(err) // prints the error as kubectl does and exits 1; nil does nothing
}
