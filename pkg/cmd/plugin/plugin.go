// Package plugin is the main function of certapi's kubectl plugins: it runs the plugin's command on the
// process's streams until SIGINT or SIGTERM, adds --version, and reports an error as kubectl does.
package plugin

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/component-base/cli"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"

	"github.com/certapi/certapi/pkg/version"
)

// Main runs the command newCmd makes for the plugin binary name, and exits 1 after printing its error
// (k8s.io/kubectl's cmdutil.CheckErr); it returns when the command succeeded.
func Main(name string, newCmd func(genericiooptions.IOStreams) *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	cmd := newCmd(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	cmd.SetContext(ctx)
	// --version, as cobra adds it when Version is set.
	cmd.Version = version.String(name)
	cmd.SetVersionTemplate("{{.Version}}\n")
	err := cli.RunNoErrOutput(cmd)
	stop()
	cmdutil.CheckErr(err) // prints the error as kubectl does and exits 1; nil does nothing
}
