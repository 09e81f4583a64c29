// Package help makes the --help of certapi's kubectl plugins read as kubectl's does: description,
// examples, subcommands, the flags in titled groups, then the usage line.
package help

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Columns is the width --help wraps flag descriptions to.
const Columns = 120

// FlagGroup is one section of the flags in --help.
type FlagGroup struct {
	// Title heads the section, e.g. "Options".
	Title string
	// Flags are the section's flags.
	Flags *pflag.FlagSet
}

// SetUsage makes cmd's --help and usage read as kubectl's do: description, examples, subcommands, the
// flags in groups, then the usage line. groups returns the groups of the command being shown (cmd or
// one of its subcommands); flags in no group (klog's, --help) are listed last, under "Other options".
func SetUsage(cmd *cobra.Command, groups func(c *cobra.Command) []FlagGroup) {
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		return writeUsage(c.OutOrStderr(), c, groups(c))
	})
	cmd.SetHelpFunc(func(c *cobra.Command, _ []string) {
		w := c.OutOrStdout()
		if c.Long != "" {
			fmt.Fprintf(w, "%s\n\n", c.Long)
		} else if c.Short != "" {
			fmt.Fprintf(w, "%s\n\n", c.Short)
		}
		_ = writeUsage(w, c, groups(c))
	})
}

func writeUsage(w io.Writer, c *cobra.Command, groups []FlagGroup) error {
	if c.HasExample() {
		fmt.Fprintf(w, "Examples:\n%s\n\n", c.Example)
	}
	if c.HasAvailableSubCommands() {
		fmt.Fprintln(w, "Available Commands:")
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(w, "  %-*s %s\n", c.NamePadding(), sub.Name(), sub.Short)
			}
		}
		fmt.Fprintln(w)
	}
	grouped := map[string]bool{}
	for _, g := range groups {
		g.Flags.VisitAll(func(f *pflag.Flag) { grouped[f.Name] = true })
	}
	other := pflag.NewFlagSet("other", pflag.ContinueOnError)
	add := func(f *pflag.Flag) {
		if !grouped[f.Name] && other.Lookup(f.Name) == nil {
			other.AddFlag(f)
		}
	}
	c.LocalFlags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	for _, g := range append(groups, FlagGroup{Title: "Other options", Flags: other}) {
		if g.Flags.HasAvailableFlags() {
			fmt.Fprintf(w, "%s:\n%s\n", g.Title, g.Flags.FlagUsagesWrapped(Columns))
		}
	}
	line := c.UseLine()
	if c.HasAvailableSubCommands() {
		line = c.CommandPath() + " [command]"
		if c.Runnable() {
			line = c.UseLine() + "\n  " + line
		}
	}
	if _, err := fmt.Fprintf(w, "Usage:\n  %s\n", line); err != nil {
		return err
	}
	if c.HasAvailableSubCommands() {
		_, err := fmt.Fprintf(w, "\nUse \"%s [command] --help\" for more information about a command.\n", c.CommandPath())
		return err
	}
	return nil
}
