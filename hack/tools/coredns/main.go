// Command coredns is the test node's cluster DNS: CoreDNS (github.com/coredns/coredns) with only the
// plugins a cluster DNS needs, linked the way CoreDNS documents for a custom build (set
// dnsserver.Directives, import the plugins, call coremain.Run), instead of the full coredns binary with
// every cloud provider's plugin: two thirds of the CPU to build cold, and 55 MB instead of 79 (see
// docs/development.md, "Build times"; most of what is left is client-go, which the kubernetes plugin
// needs). hack/build-tools.sh builds it into _output/bin/coredns (static, CGO_ENABLED=0), and hack/image
// puts it into the certapi.dev/coredns image.
//
// It is a module of its own, like hack/tools/prometheus, so that CoreDNS's dependencies never move the
// versions kube-apiserver is built with.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	// The plugins, each registering itself with CoreDNS.
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
	_ "github.com/coredns/coredns/plugin/whoami"
)

// directives are the plugins a Corefile may use, in the order CoreDNS chains them: the order of
// CoreDNS's plugin.cfg, of which this keeps what kubeadm's default Corefile uses (errors, health, ready,
// kubernetes, prometheus, forward, cache, loop, reload, loadbalance), plus log for debugging and whoami,
// which CoreDNS serves when it finds no Corefile.
var directives = []string{
	"reload",
	"ready",
	"health",
	"prometheus",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
	"forward",
	"whoami",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
