// Command certapi is the certapi aggregated API server: it issues TLS serving certificates for in-cluster
// webhooks and extension API servers from an in-cluster CA.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
	cliflag "k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics on /metrics
	"k8s.io/component-base/term"

	"github.com/certapi/certapi/pkg/apiserver"
	"github.com/certapi/certapi/pkg/cmd/selftestcmd"
	"github.com/certapi/certapi/pkg/cmd/snapshotcmd"
	"github.com/certapi/certapi/pkg/version"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	os.Exit(cli.Run(newCommand(ctx)))
}

func newCommand(ctx context.Context) *cobra.Command {
	o := apiserver.NewOptions()
	logOptions := logs.NewOptions()
	var showVersion bool
	cmd := &cobra.Command{
		Use:   "certapi",
		Short: "Issue TLS serving certificates for in-cluster webhooks from an in-cluster CA",
		Long: `certapi is a Kubernetes aggregated API server (group certapi.dev) that issues TLS serving
certificates for in-cluster webhooks and extension API servers from an in-cluster CA.

It stores its objects in etcd: an external cluster given with --etcd-servers, or, when none is given, an
embedded etcd in --data-dir: a single member, or with --etcd-peer-service one member of a cluster that
the replicas of a StatefulSet form among themselves over mutual TLS (docs/high-availability.md). Register
it with kube-apiserver through an APIService for v1alpha1.certapi.dev.

Readiness: /readyz fails until this replica serves a certificate from its own CA, etcd answers, and its
delegated authentication (the client and request-header CAs of kube-system/extension-apiserver-authentication)
and authorization work. Until authentication works, every request but the health checks is answered 503
with Retry-After rather than taken for system:anonymous.

Logs never carry private key material at any verbosity below 8, where client-go starts to log request
bodies.

Memory: unless GOMEMLIMIT is set, certapi sets the Go runtime's soft memory limit to 3/4 of the memory
limit of its cgroup (v1 or v2; the lowest of its own and its parents'), and logs the value at start-up;
the other quarter is for the pages of its executable the kernel maps and counts against the same limit.
With no cgroup limit it sets none. GOMEMLIMIT=off turns the limit off. Unless GOGC is set, certapi sets
GOGC after each garbage collection from the live heap it found (--gc-headroom).

Backup: "certapi snapshot save" and "certapi snapshot restore" save and restore certapi's etcd (its CA and
objects); see "certapi snapshot --help". "certapi selftest" checks an installed certapi as a client does (the
Helm chart's helm test runs it).`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if showVersion {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String("certapi"))
				return err
			}
			if len(args) > 0 {
				return fmt.Errorf("certapi takes no arguments, got %q", args)
			}
			if err := logsapi.ValidateAndApply(logOptions, nil); err != nil {
				return err
			}
			setMemoryLimit()
			if err := o.Validate(); err != nil {
				return err
			}
			startGCTuner(o.GCHeadroom.Quantity)
			return apiserver.Run(cmd.Context(), o)
		},
	}
	cmd.SetContext(ctx)
	cmd.AddCommand(snapshotcmd.NewCmd(), selftestcmd.NewCmd())

	fss := o.Flags()
	logsapi.AddFlags(logOptions, fss.FlagSet("logging"))
	fss.FlagSet("version").BoolVar(&showVersion, "version", false, "Print certapi's version, the commit it was built from, and the Go version and platform, then exit.")
	cliflag.SetUsageAndHelpFunc(cmd, fss, termWidth())
	for _, f := range fss.FlagSets {
		cmd.Flags().AddFlagSet(f)
	}
	return cmd
}

func termWidth() int {
	cols, _, _ := term.TerminalSize(os.Stdout)
	return cols
}
