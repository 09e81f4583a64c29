// Command kubectl-create-servingcertrequest is the kubectl plugin behind
// `kubectl create servingcertrequest NAME --service=SVC`: with the binary on PATH, kubectl 1.31 and
// later run it for that subcommand (docs/install.md says why not older ones). See `kubectl create servingcertrequest --help`.
package main

import (
	"github.com/certapi/certapi/pkg/cmd/createscr"
	"github.com/certapi/certapi/pkg/cmd/plugin"
)

func main() {
	plugin.Main("kubectl-create-servingcertrequest", createscr.NewCmd)
}
