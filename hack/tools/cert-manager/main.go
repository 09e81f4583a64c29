// Command cert-manager-controller runs cert-manager's own controllers (github.com/cert-manager/cert-manager,
// the version this module requires, from pkg/controller/...) as one process, so that certapi's tests have a
// real certificates.k8s.io/v1 CertificateSigningRequest signer that nobody on this project wrote: certapi can
// run as an intermediate CA whose certificate an organisation's CA signs through that API, and cert-manager's
// CA issuer with its experimental CertificateSigningRequest controllers is the signer most clusters have.
//
// It is cert-manager's controller binary reduced to what signing CertificateSigningRequests needs, wired the
// way cert-manager's cmd/controller/app wires it (that package is a module of its own, not on the Go module
// proxy): one controller.ContextFactory, and each enabled controller built from cert-manager's registry
// (controller.Known(), filled by the init functions of the packages linked here) and run with its workers,
// then the shared informer factories started. The controllers linked, and enabled by default:
//
//   - issuers and clusterissuers: they set an Issuer's or ClusterIssuer's Ready condition, which the signers
//     wait for (only the CA and SelfSigned issuer types are linked; an Issuer of another type is reported as
//     not registered);
//   - certificatesigningrequests-issuer-ca and certificatesigningrequests-issuer-selfsigned: the signers of
//     CertificateSigningRequests whose signerName is issuers.cert-manager.io/<namespace>.<name> or
//     clusterissuers.cert-manager.io/<name>, what cert-manager runs with
//     --feature-gates=ExperimentalCertificateSigningRequestControllers=true (that gate is set here too).
//
// What it leaves out: cert-manager's webhook does not run (no defaulting, validation or conversion of
// cert-manager's resources: the CRDs of deploy/crds serve one version, v1, and their OpenAPI schemas still
// validate; write complete objects), nor the cainjector, the Certificate, CertificateRequest and ACME
// controllers, leader election (one process), the metrics, healthz and profiling servers.
//
// It needs only a kube-apiserver: no kube-controller-manager, node or webhook. Once its informer caches have
// synced it writes a line holding ReadyMessage to standard error, which test/framework waits for.
//
// Usage:
//
//	cert-manager-controller [--kubeconfig FILE] [--cluster-resource-namespace NS] \
//	  [--controllers issuers,clusterissuers,...] [-v N]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	controllerpkg "github.com/cert-manager/cert-manager/pkg/controller"
	csrca "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/ca"
	csrselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificatesigningrequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"         // registers the CA issuer type's setup
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned" // registers the SelfSigned issuer type's setup
	logf "github.com/cert-manager/cert-manager/pkg/logs"
	utilfeature "github.com/cert-manager/cert-manager/pkg/util/feature"
)

// ReadyMessage is in the line written to standard error once the controllers run and the informer caches
// they read have synced; test/framework's StartCertManager waits for it.
const ReadyMessage = "cert-manager-controller: informer caches synced, controllers running"

// defaultControllers are the controllers run unless --controllers says otherwise: every one linked.
var defaultControllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	csrca.CSRControllerName,
	csrselfsigned.CSRControllerName,
}

// Defaults of cert-manager's controller flags that this tool has no flag for.
const (
	// workers is cert-manager's --concurrent-workers default.
	workers = 5
	// kubernetesAPIQPS and kubernetesAPIBurst are cert-manager's --kube-api-qps and --kube-api-burst
	// defaults, used only when kube-apiserver has no API Priority and Fairness.
	kubernetesAPIQPS   = 20
	kubernetesAPIBurst = 50
)

type options struct {
	kubeconfig               string
	clusterResourceNamespace string
	controllers              string
}

func main() {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster; empty: the in-cluster configuration")
	flag.StringVar(&o.clusterResourceNamespace, "cluster-resource-namespace", "kube-system",
		"namespace of the Secrets that ClusterIssuers reference (cert-manager's --cluster-resource-namespace)")
	flag.StringVar(&o.controllers, "controllers", strings.Join(defaultControllers, ","),
		"comma-separated controllers to run; accepted: "+strings.Join(defaultControllers, ", "))
	// Of klog's flags only -v: how much cert-manager logs (2 is its info level, 4 its debug level).
	var klogFlags flag.FlagSet
	klog.InitFlags(&klogFlags)
	flag.Var(klogFlags.Lookup("v").Value, "v", "log verbosity: 2 is cert-manager's info level, 4 its debug level, 5 trace")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cert-manager-controller: unexpected arguments %q: it takes flags only\n", flag.Args())
		os.Exit(2)
	}
	logf.InitLogs()
	defer logf.FlushLogs()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		logf.FlushLogs()
		fmt.Fprintf(os.Stderr, "cert-manager-controller: %v\n", err)
		os.Exit(1)
	}
}

// enabledControllers parses --controllers: each name must be one of cert-manager's controllers linked into
// this binary (controller.Known()).
func enabledControllers(list string, known map[string]controllerpkg.Constructor) ([]string, error) {
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if _, ok := known[n]; !ok {
			linked := make([]string, 0, len(known))
			for k := range known {
				linked = append(linked, k)
			}
			slices.Sort(linked)
			return nil, fmt.Errorf("--controllers: unknown controller %q; accepted: %s", n, strings.Join(linked, ", "))
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil, errors.New("--controllers is empty; name at least one of " + strings.Join(defaultControllers, ", "))
	}
	slices.Sort(names)
	return names, nil
}

// run builds cert-manager's controller context, runs the enabled controllers until ctx ends, and returns
// when they have all stopped, as cert-manager's cmd/controller/app Run does without leader election and
// without its servers.
func run(ctx context.Context, o options) error {
	names, err := enabledControllers(o.controllers, controllerpkg.Known())
	if err != nil {
		return err
	}
	// What cert-manager's --feature-gates=ExperimentalCertificateSigningRequestControllers=true sets: the
	// signers run because they are enabled here, and anything of cert-manager's that asks the gate sees it on.
	if err := utilfeature.DefaultMutableFeatureGate.Set("ExperimentalCertificateSigningRequestControllers=true"); err != nil {
		return fmt.Errorf("setting cert-manager's feature gate ExperimentalCertificateSigningRequestControllers: %w", err)
	}

	ctx = logf.NewContext(ctx, logf.Log, "controller")
	log := logf.FromContext(ctx)
	factory, err := controllerpkg.NewContextFactory(ctx, controllerpkg.ContextOptions{
		Kubeconfig:         o.kubeconfig,
		KubernetesAPIQPS:   kubernetesAPIQPS,
		KubernetesAPIBurst: kubernetesAPIBurst,
		IssuerOptions: controllerpkg.IssuerOptions{
			ClusterResourceNamespace: o.clusterResourceNamespace,
		},
	})
	if err != nil {
		return fmt.Errorf("building cert-manager's controller context from --kubeconfig %q: %w", o.kubeconfig, err)
	}
	// The informer factories are shared by every Context the factory builds: this one starts them.
	base, err := factory.Build()
	if err != nil {
		return fmt.Errorf("building cert-manager's controller context: %w", err)
	}

	// Every controller is constructed (it registers the informers it reads) before any runs.
	controllers := make([]controllerpkg.Interface, len(names))
	for i, n := range names {
		if controllers[i], err = controllerpkg.Known()[n](factory); err != nil {
			return fmt.Errorf("constructing cert-manager's controller %s: %w", n, err)
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	for i, n := range names {
		iface := controllers[i]
		// Each controller's workers log under its name.
		cctx := logf.NewContext(ctx, log, n)
		g.Go(func() error {
			log.V(logf.InfoLevel).Info("starting controller", "controller", n)
			if err := iface.Run(workers, cctx); err != nil {
				return fmt.Errorf("controller %s: %w", n, err)
			}
			return nil
		})
	}
	base.SharedInformerFactory.Start(ctx.Done())
	base.KubeSharedInformerFactory.Start(ctx.Done())
	base.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	defer func() {
		base.HTTP01ResourceMetadataInformersFactory.Shutdown()
		base.KubeSharedInformerFactory.Shutdown()
		base.SharedInformerFactory.Shutdown()
	}()

	synced := true
	for _, ok := range base.SharedInformerFactory.WaitForCacheSync(ctx.Done()) {
		synced = synced && ok
	}
	for _, ok := range base.KubeSharedInformerFactory.WaitForCacheSync(ctx.Done()) {
		synced = synced && ok
	}
	if synced {
		fmt.Fprintf(os.Stderr, "%s: %s\n", ReadyMessage, strings.Join(names, ", "))
	}
	if err := g.Wait(); err != nil {
		return err
	}
	log.V(logf.InfoLevel).Info("control loops exited")
	return nil
}
