// Command kubenode is kubelet, kube-proxy, kube-controller-manager and kube-scheduler (k8s.io/kubernetes,
// the version hack/tools pins) in one binary, as hyperkube was: linked once instead of four times, which
// saves most of the build's link time and disk. It runs the component named by the base name it was
// started under (hack/build-tools.sh makes the symlinks kubelet, kube-proxy, kube-controller-manager and
// kube-scheduler in _output/bin), or by its first argument (`kubenode kubelet --help`).
package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	_ "time/tzdata" // kube-controller-manager's CronJob time zones, as its own main has it

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // the JSON log format, as each component's main has it
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go's metrics
	_ "k8s.io/component-base/metrics/prometheus/version"  // the version metric
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

// components maps each name to its command, built as the component's own main builds it.
var components = map[string]func() *cobra.Command{
	"kubelet":                 func() *cobra.Command { return kubelet.NewKubeletCommand(context.Background()) },
	"kube-proxy":              proxy.NewProxyCommand,
	"kube-controller-manager": controllermanager.NewControllerManagerCommand,
	"kube-scheduler":          func() *cobra.Command { return scheduler.NewSchedulerCommand() },
}

func main() {
	name := filepath.Base(os.Args[0])
	newCommand, ok := components[name]
	if !ok && len(os.Args) > 1 {
		// kubenode COMPONENT [flags]: run it as if started under that name.
		if newCommand, ok = components[os.Args[1]]; ok {
			os.Args = append([]string{os.Args[1]}, os.Args[2:]...)
		}
	}
	if !ok {
		names := slices.Sorted(maps.Keys(components))
		fmt.Fprintf(os.Stderr, "usage: %s COMPONENT [flags], or run it as one of its symlinks; COMPONENT is one of %s\n", name, strings.Join(names, ", "))
		os.Exit(2)
	}
	os.Exit(cli.Run(newCommand()))
}
