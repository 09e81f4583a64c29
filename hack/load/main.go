// Command load measures certapi through kube-apiserver's aggregation layer with client-go, as operators
// call it: synchronous issuance on the servingcerts subresource at a given rate or concurrency, the time
// for N ServingCertRequests with secretName to be Ready with their Secrets, caBundle injection (--inject),
// memory (--requests), the served certificate check at many webhooks (--served), PodCertificateRequests
// made as a kubelet makes them (--pcr), and snapshot save and restore of the embedded etcd (--snapshot).
//
//	go run ./hack/load --local                     # start a local stack (test/framework) and measure
//	go run ./hack/load --kubeconfig=... -n ns ...  # measure an existing cluster
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/framework"
)

type options struct {
	local       bool
	replicas    int
	kubeconfig  string
	namespace   string
	rate        float64
	concurrency int
	duration    time.Duration
	secrets     int
	clients     int
	requests    int
	profile     string
	inject      int
	served      int
	pcr         int
	pcrRate     float64
	snapshot    bool
	certapiArgs []string
}

func main() {
	var o options
	flag.BoolVar(&o.local, "local", false, "Start etcd, kube-apiserver and certapi on loopback (test/framework) and measure that.")
	flag.IntVar(&o.replicas, "replicas", 1, "With --local: how many certapi replicas, behind a round-robin TCP proxy when more than one.")
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "Kubeconfig of an existing cluster with certapi (ignored with --local).")
	flag.StringVar(&o.namespace, "n", "certapi-load", "Namespace to create requests in (created if missing).")
	flag.Float64Var(&o.rate, "rate", 100, "Issuances per second to offer; 0 means as fast as --concurrency allows.")
	flag.IntVar(&o.concurrency, "concurrency", 16, "Issuances in flight at most.")
	flag.DurationVar(&o.duration, "duration", 10*time.Second, "How long to issue; 0 skips the issuance phase.")
	flag.IntVar(&o.secrets, "secrets", 500, "How many ServingCertRequests with secretName to create and wait for; 0 skips that phase.")
	flag.IntVar(&o.clients, "clients", 4, "Separate client-go connections to spread the load over.")
	flag.StringVar(&o.profile, "profile", "", "With --local: write into this directory (made if missing) CPU profiles (pprof) of certapi and kube-apiserver taken while each phase runs, "+
		"<phase>-certapi-cpu-NN.pprof and <phase>-kube-apiserver-cpu-NN.pprof (one per second: give them all to go tool pprof), and certapi's heap profiles "+
		"at the start of each phase and, after a GC, at its end, <phase>-certapi-heap-start.pprof and <phase>-certapi-heap.pprof. "+
		"Phases: issuance, secrets, requests, inject, served, pcr, snapshot. "+
		"Profiling costs certapi some CPU: measure the CPU figures without it.")
	flag.Func("certapi-arg", "With --local: one more argument for certapi (repeat the flag for more), e.g. --certapi-arg=--status-workers=32.", func(v string) error {
		o.certapiArgs = append(o.certapiArgs, v)
		return nil
	})
	flag.IntVar(&o.inject, "inject", 0, "Create this many annotated ValidatingWebhookConfigurations: report injection latency of new objects (median, max over the first 100), then force a CA rotation and report the time from Next published to all of them holding it.")
	flag.IntVar(&o.served, "served", 0, "With --local: make this many annotated ValidatingWebhookConfigurations, each calling its own Service whose endpoint is a TLS server of this process presenting certapi's certificate for it, and report the time to status.served counting every one Verified and certapi's CPU time for one periodic round of the served certificate check.")
	flag.IntVar(&o.pcr, "pcr", 0, "With --local: make this many PodCertificateRequests as a node's kubelet (system:node:load-node) for pods that a ServingCertRequest allows, and report the time from each create to Issued as the node's watch sees it (p50, p95, p99, max).")
	flag.Float64Var(&o.pcrRate, "pcr-rate", 50, "PodCertificateRequests per second that --pcr makes (open loop); 0 makes them as fast as it can, 32 at a time.")
	flag.BoolVar(&o.snapshot, "snapshot", false, "With --local: run certapi with its embedded etcd and, after the other phases, measure `certapi snapshot save`, then a restore into a deleted data dir and certapi's start on it (one replica).")
	flag.IntVar(&o.requests, "requests", 0, "With --local: create this many ServingCertRequests (no Secrets), then report certapi's resident memory.")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "load: %v\n", err)
		os.Exit(1)
	}
}

// Deadlines: every wait of the load tool ends, whether or not what it waits for happens.
const (
	// requestTimeout bounds one API call outside the measured loops.
	requestTimeout = time.Minute
	// warmupTimeout bounds the first issuance through every client; drainTimeout the issuances still
	// in flight when --duration ends.
	warmupTimeout = time.Minute
	drainTimeout  = time.Minute
	// createTimeout bounds creating the objects of --secrets, --requests or --inject.
	createTimeout = 10 * time.Minute
	// readyTimeout bounds the wait for all --secrets requests to be Ready.
	readyTimeout = 10 * time.Minute
	// injectTimeout bounds the wait for one new --inject object to hold a caBundle; holdTimeout the
	// wait for all of them to hold a given bundle; nextTimeout the wait for a forced rotation's Next CA.
	injectTimeout = time.Minute
	holdTimeout   = 5 * time.Minute
	nextTimeout   = time.Minute
	// settleTime is how long --requests lets certapi return freed memory after a GC before measuring.
	settleTime = 30 * time.Second
	// createParallelism is how many creates are in flight at most.
	createParallelism = 32
)

// loader is one run of the load tool: its options, its clients and, with --local, the control plane
// it started.
type loader struct {
	o options
	// config has no client-side rate limit: the load tool measures the server.
	config  *rest.Config
	kube    kubernetes.Interface
	certapi versioned.Interface
	// cp is the --local control plane; nil against an existing cluster.
	cp *framework.ControlPlane
}

func run(o options) error {
	ctx := context.Background()
	l := &loader{o: o}
	var config *rest.Config
	if o.local {
		dir, err := os.MkdirTemp("", "certapi-load-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		startCtx, cancel := context.WithTimeout(ctx, framework.StartTimeout)
		// --profiling: the memory figures run a GC through /debug/pprof, and --profile reads it; certapi
		// serves it only when told to.
		// The load makes --requests (10,000) or --secrets requests in one namespace, past the per-namespace
		// default that bounds a tenant; --certapi-arg can set it again.
		// -v=0: certapi logs as the deploy manifests run it. The test framework starts it with -v=4, which
		// logs every request it serves and every decision, work the figures should not count;
		// --certapi-arg=-v=4 restores it.
		args := append([]string{"--profiling", "--max-servingcertrequests-per-namespace=0", "-v=0"}, o.certapiArgs...)
		cp, err := framework.Start(startCtx, framework.Options{Dir: dir, CertapiReplicas: o.replicas, CertapiEmbeddedEtcd: o.snapshot, CertapiArgs: args, Stdout: os.Stderr})
		cancel()
		if err != nil {
			if cp != nil {
				framework.PrintLogTails(os.Stderr, cp.Logs())
			}
			return err
		}
		defer cp.Stop()
		config = cp.AdminConfig
		l.cp = cp
	} else {
		c, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return fmt.Errorf("loading kubeconfig: %w", err)
		}
		config = c
	}
	l.config = rest.CopyConfig(config)
	l.config.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()

	var err error
	if l.kube, err = kubernetes.NewForConfig(l.config); err != nil {
		return err
	}
	if l.certapi, err = versioned.NewForConfig(l.config); err != nil {
		return err
	}
	nsCtx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	// The namespace opts in to Secret delivery (label certapi.dev/secret-delivery=enabled) for --secrets.
	// Against an installed certapi, give its ServiceAccount the ClusterRole certapi:secret-delivery there
	// too (docs/usage.md); the certapi this tool starts runs as the kubeconfig's user.
	optIn := map[string]string{certapiv1alpha1.LabelSecretDelivery: certapiv1alpha1.SecretDeliveryEnabled}
	_, err = l.kube.CoreV1().Namespaces().Create(nsCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.namespace, Labels: optIn}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, certapiv1alpha1.LabelSecretDelivery, certapiv1alpha1.SecretDeliveryEnabled)
		_, err = l.kube.CoreV1().Namespaces().Patch(nsCtx, o.namespace, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	}
	if err != nil {
		return fmt.Errorf("creating namespace %s, opted in to Secret delivery: %w", o.namespace, err)
	}
	fmt.Printf("host: %s\n", l.config.Host)
	phases := []struct {
		name string
		on   bool
		run  func(context.Context) error
	}{
		{"issuance", o.duration > 0, l.issuance},
		{"secrets", o.secrets > 0, l.secretDelivery},
		{"requests", o.requests > 0, l.memory},
		{"inject", o.inject > 0, l.injection},
		{"served", o.served > 0, l.served},
		{"pcr", o.pcr > 0, l.podCertificates},
		{"snapshot", o.snapshot, l.snapshot},
	}
	for _, p := range phases {
		if !p.on {
			continue
		}
		prof, err := l.startProfile(ctx, p.name)
		if err != nil {
			return err
		}
		err = p.run(ctx)
		if perr := prof.finish(ctx); perr != nil {
			// The phase's figures stand without its profiles (a restarted certapi, in --snapshot).
			fmt.Fprintf(os.Stderr, "load: %v\n", perr)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// forEachParallel calls f(ctx, i) for every i in [from, to), createParallelism at a time, and returns
// how many calls failed and the last error. ctx bounds the calls, and so the wait for them.
func forEachParallel(ctx context.Context, from, to int, f func(ctx context.Context, i int) error) (failed int, err error) {
	var (
		wg sync.WaitGroup
		mu sync.Mutex
	)
	sem := make(chan struct{}, createParallelism)
	for i := from; i < to; i++ {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if e := f(ctx, i); e != nil {
				mu.Lock()
				failed, err = failed+1, e
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed, err
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	if i > 0 {
		i--
	}
	return sorted[i].Round(10 * time.Microsecond)
}
