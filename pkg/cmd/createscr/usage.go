package createscr

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpColumns is the width --help wraps flag descriptions to.
const helpColumns = 120

// flagGroup is one section of the flags in --help.
type flagGroup struct {
	title string
	flags *pflag.FlagSet
}

// setUsage makes --help read as kubectl's does: description, examples, the flags in groups, then the
// usage line. Flags in no group (klog's, --help) are listed last, under "Other options".
func setUsage(cmd *cobra.Command, groups []flagGroup) {
	cmd.SetUsageFunc(func(c *cobra.Command) error {
		return writeUsage(c.OutOrStderr(), c, groups)
	})
	cmd.SetHelpFunc(func(c *cobra.Command, _ []string) {
		w := c.OutOrStdout()
		if c.Long != "" {
			fmt.Fprintf(w, "%s\n\n", c.Long)
		}
		_ = writeUsage(w, c, groups)
	})
}

func writeUsage(w io.Writer, c *cobra.Command, groups []flagGroup) error {
	if c.HasExample() {
		fmt.Fprintf(w, "Examples:\n%s\n\n", c.Example)
	}
	grouped := map[string]bool{}
	for _, g := range groups {
		g.flags.VisitAll(func(f *pflag.Flag) { grouped[f.Name] = true })
	}
	other := pflag.NewFlagSet("other", pflag.ContinueOnError)
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if !grouped[f.Name] {
			other.AddFlag(f)
		}
	})
	c.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if !grouped[f.Name] && other.Lookup(f.Name) == nil {
			other.AddFlag(f)
		}
	})
	for _, g := range append(groups, flagGroup{title: "Other options", flags: other}) {
		if g.flags.HasAvailableFlags() {
			fmt.Fprintf(w, "%s:\n%s\n", g.title, g.flags.FlagUsagesWrapped(helpColumns))
		}
	}
	_, err := fmt.Fprintf(w, "Usage:\n  %s\n", c.UseLine())
	return err
}
