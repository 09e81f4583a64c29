// Command docgen writes certapi's generated reference pages: docs/api-reference.md from the Go types of
// pkg/apis/certapi/v1alpha1 (their doc comments, JSON names and markers), docs/flags.md from the flag
// sets certapi's command line and its kubectl plugins are made of, and the values table of the Helm
// chart's README (artifacts/charts/certapi/README.md) from the comments of its values.yaml. `make docs` runs it; `hack/verify-docs.sh` (in `make verify`)
// runs it with -check, which fails when a page in the tree differs from what it would write.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"

	"github.com/certapi/certapi/pkg/apiserver"
)

const (
	apiPackageDir = "pkg/apis/certapi/v1alpha1"
	apiPage       = "docs/api-reference.md"
	flagsPage     = "docs/flags.md"
	// chartReadmePage holds the values table between its markers; the rest of it is written by hand.
	chartReadmePage = "artifacts/charts/certapi/README.md"
	chartValues     = "artifacts/charts/certapi/values.yaml"
)

func main() {
	root := flag.String("root", ".", "The repository's root directory.")
	check := flag.Bool("check", false, "Write nothing; fail when a generated page differs from what would be written.")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	api, err := apiReference(filepath.Join(root, apiPackageDir))
	if err != nil {
		return err
	}
	readme, err := os.ReadFile(filepath.Join(root, chartReadmePage))
	if err != nil {
		return fmt.Errorf("reading %s: %w", chartReadmePage, err)
	}
	values, err := os.ReadFile(filepath.Join(root, chartValues))
	if err != nil {
		return fmt.Errorf("reading %s: %w", chartValues, err)
	}
	chart, err := chartReadme(readme, values)
	if err != nil {
		return err
	}
	pages := map[string][]byte{
		apiPage:         api,
		flagsPage:       slices.Concat(flagReference(certapiFlagSets()), subcommandReference(certapiSubcommands()), selftestReference(), pluginReference(pluginCommands())),
		chartReadmePage: chart,
	}
	stale := false
	for _, name := range []string{apiPage, flagsPage, chartReadmePage} {
		path := filepath.Join(root, name)
		if check {
			have, err := os.ReadFile(path)
			if err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("reading %s: %w", name, err)
			}
			if !bytes.Equal(have, pages[name]) {
				fmt.Fprintf(os.Stderr, "docgen: %s is not current: run `make docs` (go run ./hack/docgen) and commit it\n", name)
				stale = true
			}
			continue
		}
		if err := os.WriteFile(path, pages[name], 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
	}
	if stale {
		return fmt.Errorf("generated pages are stale")
	}
	return nil
}

// certapiFlagSets are the flag sets of `certapi --help`, as cmd/certapi assembles them: certapi's options,
// then the logging flags. (cmd/certapi adds --version, which the page lists by hand.)
func certapiFlagSets() []namedFlagSet {
	fss := apiserver.NewOptions().Flags()
	logsapi.AddFlags(logs.NewOptions(), fss.FlagSet("logging"))
	var out []namedFlagSet
	for _, name := range fss.Order {
		out = append(out, namedFlagSet{name: name, fs: fss.FlagSets[name]})
	}
	return out
}
