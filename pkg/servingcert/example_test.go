package servingcert_test

import (
	"context"
	"net/http"
	"os/signal"
	"syscall"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/certapi/certapi/pkg/servingcert"
)

// An operator built on controller-runtime serves its webhooks with a certificate from certapi: no
// cert-manager, no Secret, no CertDir, and no crash when the webhook server starts before the
// certificate exists. Its ServiceAccount needs only create on servingcertrequests/servingcerts with
// resourceNames [my-operator-webhook] (and, to follow CA rotation at once, watch on
// certificateauthorities/default); see the package documentation.
func Example() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		klog.Fatal(err)
	}
	src, err := servingcert.New(servingcert.Options{
		RestConfig: cfg,
		Namespace:  "my-operator-system",
		Name:       "my-operator-webhook", // a ServingCertRequest for Service my-operator-webhook, shipped with the manifests
	})
	if err != nil {
		klog.Fatal(err)
	}
	mgr, err := manager.New(cfg, manager.Options{
		// GetCertificate comes from src: the webhook server reads no files.
		WebhookServer:          webhook.NewServer(webhook.Options{Port: 9443, TLSOpts: src.TLSOpts()}),
		HealthProbeBindAddress: ":8081",
		LeaderElection:         true,
		LeaderElectionID:       "my-operator",
	})
	if err != nil {
		klog.Fatal(err)
	}
	// The Source runs on every replica (NeedLeaderElection is false): each one serves webhooks.
	if err := mgr.Add(src); err != nil {
		klog.Fatal(err)
	}
	// Not Ready until the first certificate is issued, and again if it ever expires.
	if err := mgr.AddReadyzCheck("serving-cert", src.Checker()); err != nil {
		klog.Fatal(err)
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		klog.Fatal(err)
	}
	mgr.GetWebhookServer().Register("/validate", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// an admission.Webhook in a real operator
	}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := mgr.Start(ctx); err != nil {
		klog.Fatal(err)
	}
}

// Without controller-runtime: a plain net/http server whose TLS configuration reads the certificate from
// the Source on every handshake.
func ExampleSource_TLSConfig() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		klog.Fatal(err)
	}
	src, err := servingcert.New(servingcert.Options{RestConfig: cfg, Namespace: "my-system", Name: "my-webhook"})
	if err != nil {
		klog.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() { _ = src.Start(ctx) }()

	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := src.Checker()(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	srv := &http.Server{Addr: ":9443", Handler: mux, TLSConfig: src.TLSConfig()}
	go func() {
		<-ctx.Done()
		_ = srv.Shutdown(context.Background())
	}()
	// No certificate files: GetCertificate in TLSConfig provides them. Until the first certificate is
	// issued, handshakes fail and the server keeps running.
	if err := srv.ListenAndServeTLS("", ""); err != http.ErrServerClosed {
		klog.Fatal(err)
	}
}
