// Command load measures certapi through kube-apiserver's aggregation layer with client-go, as operators
// call it: synchronous issuance on the servingcerts subresource at a given rate or concurrency, the time
// for N ServingCertRequests with secretName to be Ready with their Secrets, caBundle injection (--inject),
// memory (--requests), PodCertificateRequests made as a kubelet makes them (--pcr), and snapshot save and
// restore of the embedded etcd (--snapshot).
//
//	go run ./hack/load --local                     # start a local stack (test/framework) and measure
//	go run ./hack/load --kubeconfig=... -n ns ...  # measure an existing cluster
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/certapi/certapi/pkg/apis/certapi"
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
	heap        string
	cpuProfile  string
	inject      int
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
	flag.StringVar(&o.heap, "heap-profile", "", "With --local and --requests: write certapi's heap profile (pprof) to this file at the end.")
	flag.StringVar(&o.cpuProfile, "cpu-profile", "", "With --local and --secrets: write CPU profiles (pprof) of certapi and kube-apiserver, taken while the --secrets phase runs, to <this>.certapi and <this>.kube-apiserver.")
	flag.Func("certapi-arg", "With --local: one more argument for certapi (repeat the flag for more), e.g. --certapi-arg=--status-workers=32.", func(v string) error {
		o.certapiArgs = append(o.certapiArgs, v)
		return nil
	})
	flag.IntVar(&o.inject, "inject", 0, "Create this many annotated ValidatingWebhookConfigurations: report injection latency of new objects (median, max over the first 100), then force a CA rotation and report the time from Next published to all of them holding it.")
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
		// --profiling: the memory figures run a GC through /debug/pprof, and --heap-profile and
		// --cpu-profile read it; certapi serves it only when told to.
		// The load makes --requests (10,000) or --secrets requests in one namespace, past the per-namespace
		// default that bounds a tenant; --certapi-arg can set it again.
		args := append([]string{"--profiling", "--max-servingcertrequests-per-namespace=0"}, o.certapiArgs...)
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
	if _, err := l.kube.CoreV1().Namespaces().Create(nsCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", o.namespace, err)
	}
	fmt.Printf("host: %s\n", l.config.Host)
	phases := []struct {
		on  bool
		run func(context.Context) error
	}{
		{o.duration > 0, l.issuance},
		{o.secrets > 0, l.secretDelivery},
		{o.requests > 0, l.memory},
		{o.inject > 0, l.injection},
		{o.pcr > 0, l.podCertificates},
		{o.snapshot, l.snapshot},
	}
	for _, p := range phases {
		if !p.on {
			continue
		}
		if err := p.run(ctx); err != nil {
			return err
		}
	}
	return nil
}

// injection measures caBundle injection through the running server.
func (l *loader) injection(ctx context.Context) error {
	o := l.o
	vwcs := l.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	cas := l.certapi.CertapiV1alpha1().CertificateAuthorities()
	path := "/validate"
	port := int32(443)
	fail := admissionregistrationv1.Fail
	none := admissionregistrationv1.SideEffectClassNone
	mk := func(name string) *admissionregistrationv1.ValidatingWebhookConfiguration {
		return &admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"certapi.dev/inject-ca-bundle": "true"}},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name:         "x.load.certapi.dev",
				ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: o.namespace, Name: "load", Path: &path, Port: &port}},
				// Matches nothing real: the load generator only measures injection.
				Rules:                   []admissionregistrationv1.RuleWithOperations{{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create}, Rule: admissionregistrationv1.Rule{APIGroups: []string{"load.certapi.dev"}, APIVersions: []string{"v1"}, Resources: []string{"nothing"}}}},
				FailurePolicy:           &fail,
				SideEffects:             &none,
				AdmissionReviewVersions: []string{"v1"},
			}},
		}
	}
	// One at a time, so each latency is its own: create, then watch the object until the bundle lands.
	n := min(100, o.inject)
	var lat []time.Duration
	for i := range n {
		t0 := time.Now()
		if err := l.createInjected(ctx, mk(fmt.Sprintf("load-inject-%d", i))); err != nil {
			return err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	fmt.Printf("injection: a new annotated ValidatingWebhookConfiguration holds the bundle after median %s, max %s (%d objects, one at a time)\n",
		pct(lat, 50), lat[len(lat)-1].Round(time.Millisecond), n)

	createCtx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	_, _ = forEachParallel(createCtx, n, o.inject, func(ctx context.Context, i int) error {
		_, err := vwcs.Create(ctx, mk(fmt.Sprintf("load-inject-%d", i)), metav1.CreateOptions{})
		return err
	})
	allHold := func(ctx context.Context, bundle string) (int, error) {
		list, err := vwcs.List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		have := 0
		for _, v := range list.Items {
			if strings.HasPrefix(v.Name, "load-inject-") && string(v.Webhooks[0].ClientConfig.CABundle) == bundle {
				have++
			}
		}
		return have, nil
	}
	getCtx, cancelGet := context.WithTimeout(ctx, requestTimeout)
	defer cancelGet()
	ca, err := cas.Get(getCtx, "default", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, holdTimeout, true, func(ctx context.Context) (bool, error) {
		have, err := allHold(ctx, ca.Status.CABundle)
		return err == nil && have == o.inject, nil
	}); err != nil {
		return fmt.Errorf("waiting for all %d objects to hold the current bundle: %w", o.inject, err)
	}
	patch := fmt.Sprintf(`{"spec":{"forceRotation":"load-%d"}}`, time.Now().UnixNano())
	patchCtx, cancelPatch := context.WithTimeout(ctx, requestTimeout)
	defer cancelPatch()
	if _, err := cas.Patch(patchCtx, "default", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("forcing a rotation: %w", err)
	}
	var published time.Time
	var bundle string
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, nextTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := cas.Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if slices.ContainsFunc(got.Status.Certificates, func(c certapiv1alpha1.CertificateAuthorityCertificate) bool {
			return c.Role == certapiv1alpha1.CARoleNext
		}) {
			published, bundle = time.Now(), got.Status.CABundle
			return true, nil
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("waiting for the Next CA to be published: %w", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, holdTimeout, true, func(ctx context.Context) (bool, error) {
		have, err := allHold(ctx, bundle)
		return err == nil && have == o.inject, nil
	}); err != nil {
		return fmt.Errorf("waiting for all %d objects to hold the bundle with Next: %w", o.inject, err)
	}
	fmt.Printf("injection: all %d opted-in ValidatingWebhookConfigurations hold [Active, Next] %s after Next was published (seen in CertificateAuthority status)\n",
		o.inject, time.Since(published).Round(time.Millisecond))
	return nil
}

// createInjected creates vwc, then watches it from the resourceVersion of its creation until its
// first webhook holds a caBundle, for at most injectTimeout.
func (l *loader) createInjected(ctx context.Context, vwc *admissionregistrationv1.ValidatingWebhookConfiguration) error {
	ctx, cancel := context.WithTimeout(ctx, injectTimeout)
	defer cancel()
	created, err := l.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	if len(created.Webhooks[0].ClientConfig.CABundle) > 0 {
		return nil
	}
	lw := cache.NewListWatchFromClient(l.kube.AdmissionregistrationV1().RESTClient(), "validatingwebhookconfigurations", metav1.NamespaceAll,
		fields.OneTermEqualSelector("metadata.name", vwc.Name))
	if _, err := watchtools.Until(ctx, created.ResourceVersion, lw, func(ev watch.Event) (bool, error) {
		v, ok := ev.Object.(*admissionregistrationv1.ValidatingWebhookConfiguration)
		return ok && len(v.Webhooks[0].ClientConfig.CABundle) > 0, nil
	}); err != nil {
		return fmt.Errorf("waiting for ValidatingWebhookConfiguration %s to hold a caBundle: %w", vwc.Name, err)
	}
	return nil
}

// memory creates o.requests ServingCertRequests and reports certapi's resident set size.
func (l *loader) memory(ctx context.Context) error {
	o := l.o
	if l.cp == nil {
		return fmt.Errorf("--requests needs --local: it reads certapi's memory from /proc")
	}
	scrs := l.certapi.CertapiV1alpha1().ServingCertRequests(o.namespace)
	before, err := l.certapiMemory()
	if err != nil {
		return err
	}
	start := time.Now()
	createCtx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	failed, _ := forEachParallel(createCtx, 0, o.requests, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("m%d", i)
		_, err := scrs.Create(ctx, &certapiv1alpha1.ServingCertRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: name, DNSNames: []string{"*." + name + "." + o.namespace + ".svc"}},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
	if failed > 0 {
		return fmt.Errorf("%d of %d creates failed", failed, o.requests)
	}
	// A full list through the API, as a controller's relist would do, then measure.
	if _, err := scrs.List(createCtx, metav1.ListOptions{}); err != nil {
		return err
	}
	created := time.Since(start)
	after, err := l.certapiMemory()
	if err != nil {
		return err
	}
	// The burst of creates leaves garbage the runtime has not collected or returned yet: run a GC through
	// pprof (?gc=1) and let the scavenger return freed pages, then measure the steady state.
	if err := l.heapProfile(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(settleTime):
	}
	steady, err := l.certapiMemory()
	if err != nil {
		return err
	}
	fmt.Printf("memory: certapi RSS %s before, %s right after creating %d ServingCertRequests (in %s), %s 30 s after a GC "+
		"(anonymous: heap and stacks; file: the pages of certapi's binary the kernel maps)\n",
		before, after, o.requests, created.Round(time.Millisecond), steady)
	return nil
}

// memSample is a process's resident memory, in bytes.
type memSample struct {
	rss  int64 // all of it
	anon int64 // its anonymous part: heap and stacks; the rest maps the binary
}

// String is the sample in MiB: all of it, then its anonymous and file parts.
func (m memSample) String() string {
	return fmt.Sprintf("%d MiB (%d anonymous, %d file)", m.rss>>20, m.anon>>20, (m.rss-m.anon)>>20)
}

// certapiMemory reads the resident memory of certapi (replica 0) of the --local control plane from
// /proc/<pid>/status.
func (l *loader) certapiMemory() (memSample, error) {
	pid := l.cp.ReplicaPID(0)
	if pid == 0 {
		return memSample{}, fmt.Errorf("%s of the local control plane is not running", l.cp.ReplicaName(0))
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memSample{}, err
	}
	var m memSample
	for line := range strings.Lines(string(status)) {
		key, value, _ := strings.Cut(line, ":")
		var kb int64
		if _, err := fmt.Sscanf(value, "%d", &kb); err != nil {
			continue
		}
		switch key {
		case "VmRSS":
			m.rss = kb << 10
		case "RssAnon":
			m.anon = kb << 10
		}
	}
	if m.rss == 0 {
		return memSample{}, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	return m, nil
}

// issuance offers o.rate issuances per second for o.duration and reports latency percentiles.
func (l *loader) issuance(ctx context.Context) error {
	o := l.o
	ctx, cancel := context.WithTimeout(ctx, warmupTimeout+o.duration+drainTimeout)
	defer cancel()
	var clients []versioned.Interface
	for i := 0; i < o.clients; i++ {
		c := rest.CopyConfig(l.config)
		c.UserAgent = fmt.Sprintf("certapi-load/%d", i)
		// A custom dialer makes client-go build this client its own transport, so each client has its own
		// connection to kube-apiserver instead of sharing one cached HTTP/2 connection.
		c.Dial = (&net.Dialer{Timeout: 10 * time.Second}).DialContext
		cs, err := versioned.NewForConfig(c)
		if err != nil {
			return err
		}
		clients = append(clients, cs)
	}
	scrs := clients[0].CertapiV1alpha1().ServingCertRequests(o.namespace)
	if _, err := scrs.Create(ctx, &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "load"},
		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: "load"},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	csr, err := makeCSR()
	if err != nil {
		return err
	}
	body := &certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: csr}}

	// Warm up: the first call waits for the leader and opens connections.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, warmupTimeout, true, func(ctx context.Context) (bool, error) {
		for _, c := range clients {
			if _, err := c.CertapiV1alpha1().ServingCertRequests(o.namespace).CreateServingCert(ctx, "load", body, metav1.CreateOptions{}); err != nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}

	// Calls still in flight when o.duration ends have until ctx's deadline (drainTimeout) to finish.
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failures  int
		wg        sync.WaitGroup
	)
	sem := make(chan struct{}, o.concurrency)
	start := time.Now()
	deadline := start.Add(o.duration)
	var interval time.Duration
	if o.rate > 0 {
		interval = time.Duration(float64(time.Second) / o.rate)
	}
	for n := 0; time.Now().Before(deadline); n++ {
		if interval > 0 {
			// Open loop: the n-th call is due at start + n*interval, however long earlier ones took.
			if d := time.Until(start.Add(time.Duration(n) * interval)); d > 0 {
				time.Sleep(d)
			}
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(c versioned.Interface) {
			defer func() { <-sem; wg.Done() }()
			t0 := time.Now()
			_, err := c.CertapiV1alpha1().ServingCertRequests(o.namespace).CreateServingCert(ctx, "load", body, metav1.CreateOptions{})
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failures++
				return
			}
			latencies = append(latencies, d)
		}(clients[n%len(clients)])
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(latencies)
	fmt.Printf("issuance: offered %.0f/s (concurrency %d, %d clients) for %s: %d ok, %d failed, %.1f certificates/s\n",
		o.rate, o.concurrency, o.clients, o.duration, len(latencies), failures, float64(len(latencies))/elapsed.Seconds())
	if len(latencies) > 0 {
		fmt.Printf("  latency p50 %s  p95 %s  p99 %s  max %s\n", pct(latencies, 50), pct(latencies, 95), pct(latencies, 99), latencies[len(latencies)-1])
	}
	return nil
}

// secretDelivery creates o.secrets requests with secretName and waits until every one is Ready with its Secret.
func (l *loader) secretDelivery(ctx context.Context) error {
	o := l.o
	scrs := l.certapi.CertapiV1alpha1().ServingCertRequests(o.namespace)
	prefix := fmt.Sprintf("s%d-", time.Now().Unix()%100000)
	if o.cpuProfile != "" && l.cp != nil {
		profiled := l.cpuProfiles(ctx, cpuProfileSeconds)
		defer func() {
			if err := <-profiled; err != nil {
				fmt.Fprintf(os.Stderr, "load: CPU profiles: %v\n", err)
			}
		}()
	}
	var before phaseMetrics
	if l.cp != nil {
		var err error
		if before, err = l.scrapeBoth(ctx); err != nil {
			return fmt.Errorf("metrics before the --secrets phase: %w", err)
		}
	}
	start := time.Now()
	createCtx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	if _, err := forEachParallel(createCtx, 0, o.secrets, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("%s%d", prefix, i)
		_, err := scrs.Create(ctx, &certapiv1alpha1.ServingCertRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: name, SecretName: name + "-tls"},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("creating requests: %w", err)
	}
	created := time.Since(start)
	// Watch rather than poll: listing hundreds of Secrets every few milliseconds would load kube-apiserver
	// and distort the figure. certapi sets Ready=True only after the Secret is written.
	if err := l.waitAllReady(ctx, prefix, o.secrets); err != nil {
		return err
	}
	ready := time.Since(start)
	listCtx, cancelList := context.WithTimeout(ctx, requestTimeout)
	defer cancelList()
	secrets, err := l.kube.CoreV1().Secrets(o.namespace).List(listCtx, metav1.ListOptions{LabelSelector: "certapi.dev/managed=true"})
	if err != nil {
		return fmt.Errorf("listing Secrets: %w", err)
	}
	have := 0
	for _, s := range secrets.Items {
		if strings.HasPrefix(s.Name, prefix) && len(s.Data["tls.crt"]) > 0 && len(s.Data["tls.key"]) > 0 {
			have++
		}
	}
	if have < o.secrets {
		return fmt.Errorf("%d requests are Ready but only %d of their Secrets exist", o.secrets, have)
	}
	total := ready
	fmt.Printf("secrets: %d ServingCertRequests created in %s; all Ready with their Secrets after %s (%.0f certificates/s end to end)\n",
		o.secrets, created.Round(time.Millisecond), total.Round(time.Millisecond), float64(o.secrets)/total.Seconds())
	if l.cp != nil {
		after, err := l.scrapeBoth(ctx)
		if err != nil {
			return fmt.Errorf("metrics after the --secrets phase: %w", err)
		}
		printPhase(before, after, o.secrets)
	}
	return nil
}

// metricsSnapshot is one scrape of a /metrics endpoint: each sample's value by its series (the metric name
// with its labels, as exposed).
type metricsSnapshot map[string]float64

// scrape reads base+"/metrics" with client.
func scrape(ctx context.Context, client *http.Client, base string) (metricsSnapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scraping %s/metrics: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s/metrics: %s", base, resp.Status)
	}
	snap := metricsSnapshot{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			snap[line[:i]] = v
		}
	}
	return snap, sc.Err()
}

// sum adds up, by the values of the labels named in by, the samples of metric that changed from before
// to s. Series that did not exist before count from zero.
func (s metricsSnapshot) sum(before metricsSnapshot, metric string, by ...string) map[string]float64 {
	out := map[string]float64{}
	for series, v := range s {
		if !strings.HasPrefix(series, metric+"{") {
			continue
		}
		d := v - before[series]
		if d == 0 {
			continue
		}
		var key []string
		for _, label := range by {
			key = append(key, labelValue(series, label))
		}
		out[strings.Join(key, " ")] += d
	}
	return out
}

// labelValue returns the value of label in a series as exposed (name{a="x",b="y"}), or "".
func labelValue(series, label string) string {
	i := strings.Index(series, "{"+label+`="`)
	if i < 0 {
		i = strings.Index(series, ","+label+`="`)
	}
	if i < 0 {
		return ""
	}
	v := series[i+len(label)+3:]
	return v[:strings.IndexByte(v, '"')]
}

// phaseMetrics is what is compared at the two ends of a phase: certapi's and kube-apiserver's /metrics,
// and the CPU time used so far by each process of the local control plane and by this one.
type phaseMetrics struct {
	certapi, kube metricsSnapshot
	cpu           map[string]time.Duration
}

// clockTicks is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on every Linux platform Go
// supports).
const clockTicks = 100

// cpuTimes returns the user+system CPU time of each process of the local control plane (by name) and of
// this load generator ("load").
func (l *loader) cpuTimes() (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	for name, pid := range l.cp.PIDs() {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil, fmt.Errorf("reading the CPU time of %s: %w", name, err)
		}
		// The command name (field 2) may hold spaces; utime and stime are fields 14 and 15.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 13 {
			return nil, fmt.Errorf("unexpected /proc/%d/stat of %s: %q", pid, name, stat)
		}
		var ticks int64
		for _, f := range fields[11:13] {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("unexpected /proc/%d/stat of %s: %w", pid, name, err)
			}
			ticks += v
		}
		out[name] = time.Duration(ticks) * time.Second / clockTicks
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return nil, fmt.Errorf("reading this process's CPU time: %w", err)
	}
	out["load"] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return out, nil
}

func (l *loader) scrapeBoth(ctx context.Context) (phaseMetrics, error) {
	var m phaseMetrics
	certapiClient, err := l.cp.CertapiHTTPClient()
	if err != nil {
		return m, err
	}
	kubeClient, err := rest.HTTPClientFor(l.cp.AdminConfig)
	if err != nil {
		return m, err
	}
	if m.certapi, err = scrape(ctx, certapiClient, l.cp.CertapiURL); err != nil {
		return m, err
	}
	if m.kube, err = scrape(ctx, kubeClient, l.cp.APIServerURL); err != nil {
		return m, err
	}
	m.cpu, err = l.cpuTimes()
	return m, err
}

// printPhase prints what a --secrets run of n requests cost: the API calls certapi made and the requests
// kube-apiserver served, per request, and how many items each of the leader's work queues handled, with
// their mean wait in the queue and mean work time.
func printPhase(before, after phaseMetrics, n int) {
	var total time.Duration
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(after.cpu)) {
		d := after.cpu[name] - before.cpu[name]
		total += d
		parts = append(parts, fmt.Sprintf("%s %.2f ms", name, float64(d)/float64(time.Millisecond)/float64(n)))
	}
	fmt.Printf("  CPU time per request: %.2f ms in all (%s)\n", float64(total)/float64(time.Millisecond)/float64(n), strings.Join(parts, ", "))
	printPer := func(title string, m map[string]float64) {
		fmt.Printf("  %s, per request:\n", title)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if per := m[k] / float64(n); per >= 0.05 {
				fmt.Printf("    %-60s %5.2f\n", k, per)
			}
		}
	}
	printPer("certapi's API calls (rest_client_requests_total: host method)",
		after.certapi.sum(before.certapi, "rest_client_requests_total", "host", "method"))
	printPer("kube-apiserver's requests (apiserver_request_total: verb group resource subresource)",
		after.kube.sum(before.kube, "apiserver_request_total", "verb", "group", "resource", "subresource"))
	counts := after.certapi.sum(before.certapi, "workqueue_queue_duration_seconds_count", "name")
	waits := after.certapi.sum(before.certapi, "workqueue_queue_duration_seconds_sum", "name")
	works := after.certapi.sum(before.certapi, "workqueue_work_duration_seconds_sum", "name")
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		c := counts[name]
		wait := time.Duration(waits[name] / c * float64(time.Second))
		work := time.Duration(works[name] / c * float64(time.Second))
		fmt.Printf("  queue %-26s %6.0f items, mean wait %8s, mean work %8s\n", name, c, wait.Round(10*time.Microsecond), work.Round(10*time.Microsecond))
	}
}

// waitAllReady watches the namespace's requests until n of those named with prefix are Ready=True, for
// at most readyTimeout.
func (l *loader) waitAllReady(ctx context.Context, prefix string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	lw := cache.NewListWatchFromClient(l.certapi.CertapiV1alpha1().RESTClient(), "servingcertrequests", l.o.namespace, fields.Everything())
	ready := map[string]bool{}
	if _, err := watchtools.UntilWithSync(ctx, lw, &certapiv1alpha1.ServingCertRequest{}, nil, func(ev watch.Event) (bool, error) {
		if r, ok := ev.Object.(*certapiv1alpha1.ServingCertRequest); ok && strings.HasPrefix(r.Name, prefix) &&
			meta.IsStatusConditionTrue(r.Status.Conditions, certapi.ConditionReady) {
			ready[r.Name] = true
		}
		return len(ready) >= n, nil
	}); err != nil {
		return fmt.Errorf("%d of %d requests Ready when the wait ended: %w", len(ready), n, err)
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

func makeCSR() (string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return "", err
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})), nil
}

// cpuProfileSeconds is how long --cpu-profile profiles: about the length of a 500-Secret run.
const cpuProfileSeconds = 5

// cpuProfiles starts taking seconds-long CPU profiles of certapi and kube-apiserver at once, writes them
// to o.cpuProfile plus ".certapi" and ".kube-apiserver", and reports on the channel when both are done.
func (l *loader) cpuProfiles(ctx context.Context, seconds int) <-chan error {
	done := make(chan error, 1)
	certapiClient, err := l.cp.CertapiHTTPClient()
	if err != nil {
		done <- err
		return done
	}
	certapiClient.Timeout = 0 // the context bounds the profile
	kubeClient, err := rest.HTTPClientFor(l.cp.AdminConfig)
	if err != nil {
		done <- err
		return done
	}
	fetch := func(client *http.Client, base, file string) error {
		ctx, cancel := context.WithTimeout(ctx, time.Duration(seconds)*time.Second+requestTimeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, seconds), nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("profiling %s: %w", base, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("profiling %s: %s", base, resp.Status)
		}
		f, err := os.Create(file)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(f, resp.Body)
		return err
	}
	errs := make(chan error, 2)
	go func() { errs <- fetch(certapiClient, l.cp.CertapiURL, l.o.cpuProfile+".certapi") }()
	go func() { errs <- fetch(kubeClient, l.cp.APIServerURL, l.o.cpuProfile+".kube-apiserver") }()
	go func() { done <- errors.Join(<-errs, <-errs) }()
	return done
}

// heapProfile runs a GC in certapi and saves its /debug/pprof/heap to o.heap (discarded when that is "").
func (l *loader) heapProfile(ctx context.Context) error {
	client, err := l.cp.CertapiHTTPClient()
	if err != nil {
		return err
	}
	client.Timeout = time.Minute
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.cp.CertapiURL+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fetching the heap profile: %w", err)
	}
	defer resp.Body.Close()
	if l.o.heap == "" {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	f, err := os.Create(l.o.heap)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
