// Command kubectl-create-servingcertrequest is the kubectl plugin behind
// `kubectl create servingcertrequest NAME --service=SVC`: with the binary on PATH, kubectl 1.26 and
// later run it for that subcommand. See `kubectl create servingcertrequest --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/component-base/cli"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"

	"github.com/certapi/certapi/pkg/cmd/createscr"
	"github.com/certapi/certapi/pkg/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := createscr.NewCmd(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	cmd.SetContext(ctx)
	// --version, as cobra adds it when Version is set.
	cmd.Version = version.String("kubectl-create-servingcertrequest")
	cmd.SetVersionTemplate("{{.Version}}\n")
	err := cli.RunNoErrOutput(cmd)
	stop()
	cmdutil.CheckErr(err) // prints the error as kubectl does and exits 1; nil does nothing
}
