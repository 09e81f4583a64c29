package servingcert_test

// With controller-runtime, see artifacts/examples/webhook in certapi's repository: this module does not
// require controller-runtime, so an operator keeps the version it has.

import (
	"context"
	"net/http"
	"os/signal"
	"syscall"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/servingcert"
)

// A plain net/http server whose TLS configuration reads the certificate from
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
