// Command local-up runs etcd, kube-apiserver and certapi as processes on loopback, with certapi registered
// through an APIService, so a person can try certapi with kubectl. It runs until interrupted, then stops
// everything it started. hack/local-up.sh (make local-up) is the way to run it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/certapi/certapi/test/framework"
)

func main() {
	dir := flag.String("dir", filepath.Join("_output", "local"), "Directory for the stack's PKI, data, logs and kubeconfig; emptied at start.")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintf(os.Stderr, "local-up: %v\n", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	// Each run starts from nothing: a new PKI would not match an old etcd's objects.
	if err := os.RemoveAll(abs); err != nil {
		return fmt.Errorf("emptying %s: %w", abs, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	startCtx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cp, err := framework.Start(startCtx, framework.Options{Dir: abs, Stdout: os.Stdout})
	if err != nil {
		if cp != nil {
			framework.PrintLogTails(os.Stderr, cp.Logs())
			cp.Stop()
		}
		return err
	}
	defer cp.Stop()

	kubeconfig := filepath.Join(abs, "kubeconfig")
	if cp.Kubeconfig != kubeconfig {
		data, err := os.ReadFile(cp.Kubeconfig)
		if err != nil {
			return err
		}
		if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
			return err
		}
	}
	rel, err := filepath.Rel(mustGetwd(), kubeconfig)
	if err != nil {
		rel = kubeconfig
	}
	fmt.Printf(`
certapi is up and registered with kube-apiserver as v1alpha1.certapi.dev.

  export KUBECONFIG=%[1]s

Try:
  kubectl api-resources --api-group=certapi.dev
  kubectl create namespace demo
  cat <<EOY | kubectl apply --server-side -n demo -f -
apiVersion: certapi.dev/v1alpha1
kind: ServingCertRequest
metadata:
  name: my-webhook
spec:
  serviceName: my-webhook
  dnsNames: ["My-Webhook-Admin.demo.svc."]
EOY
  kubectl get scr -n demo
  kubectl explain servingcertrequest.spec
  kubectl get certapi -A

Logs: %[2]s
Press Ctrl-C to stop everything.
`, rel, filepath.Join(abs, "logs"))

	<-ctx.Done()
	fmt.Println("\nstopping...")
	return nil
}

func mustGetwd() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	return wd
}
