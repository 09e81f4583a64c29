// Command webhook is certapi's example operator: a small validating admission webhook, built on
// controller-runtime, whose serving certificate comes from certapi through pkg/servingcert. It is a demo:
// it refuses ConfigMaps labelled example.certapi.dev/forbidden=true and allows everything else.
//
// There is no certificate file, Secret, volume or cert-manager anywhere. At start-up the webhook server
// listens at once, but every TLS handshake fails until pkg/servingcert has made a key in memory and got
// a certificate for it from the servingcerts subresource of the ServingCertRequest named by --request;
// readiness (/readyz) says so. The certificate is then renewed, and re-issued when certapi's CA
// rotates, without a restart. kube-apiserver trusts it because certapi injects its CA bundle into the
// ValidatingWebhookConfiguration, which is annotated certapi.dev/inject-ca-bundle: "true".
//
// See README.md beside this file for the manifests and for running it against `make local-up`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/certapi/certapi/pkg/servingcert"
)

const (
	// ForbiddenLabel marks a ConfigMap this webhook refuses (with the value "true").
	ForbiddenLabel = "example.certapi.dev/forbidden"
	// ValidatePath is where the webhook server serves the ConfigMap validator; the
	// ValidatingWebhookConfiguration's clientConfig.service.path names it.
	ValidatePath = "/validate-v1-configmap"
)

type options struct {
	namespace, request     string
	bindAddress            string
	port                   int
	kubeconfig             string
	metricsBindAddress     string
	healthProbeBindAddress string
}

func main() {
	var o options
	flag.StringVar(&o.namespace, "namespace", "example-webhook", "Namespace of the ServingCertRequest (and of the Service it names).")
	flag.StringVar(&o.request, "request", "example-webhook", "Name of the ServingCertRequest whose servingcerts subresource issues this webhook's serving certificate.")
	flag.StringVar(&o.bindAddress, "bind-address", "127.0.0.1", "Address the webhook server listens on (0.0.0.0 in a cluster).")
	flag.IntVar(&o.port, "port", 9443, "Port the webhook server listens on.")
	flag.StringVar(&o.kubeconfig, "kubeconfig", "", "Kubeconfig file to reach kube-apiserver with. Empty: the in-cluster configuration (the pod's ServiceAccount).")
	flag.StringVar(&o.metricsBindAddress, "metrics-bind-address", "0", `Address of the Prometheus metrics endpoint; "0" turns it off.`)
	flag.StringVar(&o.healthProbeBindAddress, "health-probe-bind-address", "127.0.0.1:8081", `Address of /healthz and /readyz (plain HTTP); "0" turns them off.`)
	// Of klog's flags, only -v: the log goes to stderr, for the container runtime (or local-up) to keep.
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	flag.CommandLine.Var(klogFlags.Lookup("v").Value, "v", "Log verbosity: 0 logs each issuance and failure; 2 and more add detail.")
	flag.Parse()
	ctrllog.SetLogger(klog.Background())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		klog.ErrorS(err, "example webhook failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.InfoS("Stopped")
	klog.Flush()
}

func run(ctx context.Context, o options) error {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}

	// The certificate source: a key in memory, a certificate from certapi, renewed and re-issued on a CA
	// rotation for as long as the process runs. It needs RBAC create on servingcertrequests/servingcerts
	// for this one request, and watch on certificateauthorities/default (manifests/rbac.yaml).
	src, err := servingcert.New(servingcert.Options{RestConfig: cfg, Namespace: o.namespace, Name: o.request})
	if err != nil {
		return err
	}

	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return err
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme: scheme,
		// TLSOpts gives the server src.GetCertificate: it reads no CertDir and no file.
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    o.bindAddress,
			Port:    o.port,
			TLSOpts: src.TLSOpts(),
		}),
		Metrics:                metricsserver.Options{BindAddress: o.metricsBindAddress},
		HealthProbeBindAddress: o.healthProbeBindAddress,
		// No leader election: there is no controller here, and every replica serves webhooks.
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	// Every replica runs the Source (it reports NeedLeaderElection false): each one serves.
	if err := mgr.Add(src); err != nil {
		return err
	}
	// Not Ready until the first certificate is issued, and again if it ever expired; then the Service
	// sends no traffic to a pod whose handshakes would fail.
	if err := mgr.AddReadyzCheck("serving-cert", src.Checker()); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	mgr.GetWebhookServer().Register(ValidatePath, admission.WithValidator[*corev1.ConfigMap](scheme, configMapValidator{}))

	log := klog.Background().WithName("example-webhook")
	log.Info("Waiting for a serving certificate from certapi; TLS handshakes fail until it is issued (no certificate file is read)",
		"servingCertRequest", o.namespace+"/"+o.request, "address", fmt.Sprintf("%s:%d", o.bindAddress, o.port))
	go func() {
		if err := src.WaitReady(ctx); err == nil {
			log.Info("Serving certificate issued: serving webhooks", "path", ValidatePath, "notAfter", src.NotAfter())
		}
	}()
	return mgr.Start(ctx)
}

// restConfig reads kubeconfig, or the in-cluster configuration when it is empty.
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig, and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading --kubeconfig=%s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// configMapValidator is the whole of this operator's policy: a ConfigMap labelled
// example.certapi.dev/forbidden=true is refused, on create and on update; everything else is allowed.
// The ValidatingWebhookConfiguration sends it only ConfigMaps in namespaces labelled
// example.certapi.dev/validate=enabled.
type configMapValidator struct{}

func (configMapValidator) ValidateCreate(_ context.Context, cm *corev1.ConfigMap) (admission.Warnings, error) {
	return nil, check(cm)
}

func (configMapValidator) ValidateUpdate(_ context.Context, _, cm *corev1.ConfigMap) (admission.Warnings, error) {
	return nil, check(cm)
}

func (configMapValidator) ValidateDelete(context.Context, *corev1.ConfigMap) (admission.Warnings, error) {
	return nil, nil
}

func check(cm *corev1.ConfigMap) error {
	if cm.Labels[ForbiddenLabel] != "true" {
		return nil
	}
	name := cm.Name
	if name == "" {
		name = cm.GenerateName + "*"
	}
	return fmt.Errorf("ConfigMap %q is labelled %s=true, and the certapi example webhook refuses those; remove the label to create it",
		name, ForbiddenLabel)
}
