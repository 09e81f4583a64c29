package main

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/certapi/certapi/pkg/cmd/createscr"
	"github.com/certapi/certapi/pkg/cmd/kubectlcertapi"
	"github.com/certapi/certapi/pkg/cmd/selftestcmd"
	"github.com/certapi/certapi/pkg/cmd/snapshotcmd"
)

// pluginCommands are the kubectl plugins' command trees, as their binaries build them.
func pluginCommands() []*cobra.Command {
	streams := genericiooptions.NewTestIOStreamsDiscard()
	return []*cobra.Command{createscr.NewCmd(streams), kubectlcertapi.NewCmd(streams)}
}

// connectionFlags are the kubeconfig and connection flags both plugins share with kubectl.
func connectionFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("kubeconfig", pflag.ContinueOnError)
	genericclioptions.NewConfigFlags(true).AddFlags(fs)
	// The cache directory's default is under the home directory of whoever runs the generator: write it as
	// kubectl documents it, so that the page does not depend on the machine.
	if f := fs.Lookup("cache-dir"); f != nil {
		f.DefValue = "$HOME/.kube/cache"
	}
	return fs
}

// certapiSubcommands is certapi's command tree below the server: `certapi snapshot` and its subcommands, as
// cmd/certapi adds them to its root command.
func certapiSubcommands() *cobra.Command {
	root := &cobra.Command{Use: "certapi"}
	root.AddCommand(snapshotcmd.NewCmd())
	return root
}

// subcommandReference renders each runnable subcommand of certapi with its own flags.
func subcommandReference(root *cobra.Command) []byte {
	var b bytes.Buffer
	b.WriteString("\n## certapi snapshot\n\nSave, restore and verify etcd snapshots of certapi's CA and objects ([backup-and-restore.md](backup-and-restore.md)). These commands take their own flags, not the server's.\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.Hidden && c.HasParent() && c.Name() != "snapshot" {
			fmt.Fprintf(&b, "\n### %s\n\n%s.\n", displayPath(c), strings.TrimSuffix(strings.TrimSpace(c.Short), "."))
			own := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
			c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
				if f.Name != "help" {
					own.AddFlag(f)
				}
			})
			if own.HasAvailableFlags() {
				writeFlagTable(&b, own)
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return b.Bytes()
}

// selftestReference renders `certapi selftest`, which the Helm chart's helm test runs, with its flags.
func selftestReference() []byte {
	c := selftestcmd.NewCmd()
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n## certapi selftest\n\n%s. The Helm chart's `helm test` Pod runs it with certapi's image ([install.md](install.md#test-the-install)). It takes its own flags, not the server's.\n", strings.TrimSuffix(strings.TrimSpace(c.Short), "."))
	own := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			own.AddFlag(f)
		}
	})
	writeFlagTable(&b, own)
	return b.Bytes()
}

// pluginReference renders each runnable command of the plugins with its own flags, then the connection
// flags they share, once.
func pluginReference(roots []*cobra.Command) []byte {
	conn := connectionFlags()
	var b bytes.Buffer
	b.WriteString("\n## kubectl plugins\n\nThe flags of `kubectl create servingcertrequest` and `kubectl certapi` (built by `make build`, installed\nby `make install`), by command; every command also takes the [connection flags](#connection-flags-of-the-kubectl-plugins).\n")
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Runnable() && !c.Hidden {
			fmt.Fprintf(&b, "\n### %s\n\n%s.\n", displayPath(c), strings.TrimSuffix(strings.TrimSpace(c.Short), "."))
			own := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
			c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
				if conn.Lookup(f.Name) == nil && f.Name != "help" {
					own.AddFlag(f)
				}
			})
			if own.HasAvailableFlags() {
				writeFlagTable(&b, own)
			}
		}
		for _, sub := range c.Commands() {
			if sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub)
			}
		}
	}
	for _, root := range roots {
		walk(root)
	}
	b.WriteString("\n### Connection flags of the kubectl plugins\n\nAs kubectl's own.\n")
	writeFlagTable(&b, conn)
	return b.Bytes()
}

// displayPath is how a user types a command: kubectl runs the binary kubectl-certapi for `kubectl certapi`.
func displayPath(c *cobra.Command) string {
	var names []string
	for ; c != nil; c = c.Parent() {
		name := c.Name()
		if c.Parent() == nil {
			if d := c.Annotations[cobra.CommandDisplayNameAnnotation]; d != "" {
				name = d
			}
		}
		names = append([]string{name}, names...)
	}
	return strings.Join(names, " ")
}
