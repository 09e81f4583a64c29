// Command kubectl-certapi is the kubectl plugin behind `kubectl certapi`: with the binary on PATH, kubectl
// runs it for `kubectl certapi status|check|rotate|distrust|inspect|migrate|renew|completion`. See
// `kubectl certapi --help`.
package main

import (
	"github.com/certapi/certapi/pkg/cmd/kubectlcertapi"
	"github.com/certapi/certapi/pkg/cmd/plugin"
)

func main() {
	plugin.Main("kubectl-certapi", kubectlcertapi.NewCmd)
}
