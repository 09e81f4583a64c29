// Command load measures certapi through kube-apiserver's aggregation layer with client-go, as operators
// call it: synchronous issuance on the servingcerts subresource at a given rate or concurrency, and the
// time for N ServingCertRequests with secretName to be Ready with their Secrets.
//
//	go run ./hack/load --local                     # start a local stack (test/framework) and measure
//	go run ./hack/load --kubeconfig=... -n ns ...  # measure an existing cluster
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	typedv1alpha1 "github.com/certapi/certapi/pkg/generated/clientset/versioned/typed/certapi/v1alpha1"
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
	inject      int
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
	flag.IntVar(&o.inject, "inject", 0, "Create this many annotated ValidatingWebhookConfigurations: report injection latency of new objects (median, max over the first 100), then force a CA rotation and report the time from Next published to all of them holding it.")
	flag.IntVar(&o.requests, "requests", 0, "With --local: create this many ServingCertRequests (no Secrets), then report certapi's resident memory.")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "load: %v\n", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx := context.Background()
	var config *rest.Config
	if o.local {
		dir, err := os.MkdirTemp("", "certapi-load-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		cp, err := framework.Start(ctx, framework.Options{Dir: dir, CertapiReplicas: o.replicas, Stdout: os.Stderr})
		if err != nil {
			if cp != nil {
				framework.PrintLogTails(os.Stderr, cp.Logs())
			}
			return err
		}
		defer cp.Stop()
		config = cp.AdminConfig
		localDir = dir
		localPlane = cp
	} else {
		c, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
		if err != nil {
			return fmt.Errorf("loading kubeconfig: %w", err)
		}
		config = c
	}
	config = rest.CopyConfig(config)
	config.RateLimiter = flowcontrol.NewFakeAlwaysRateLimiter()

	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", o.namespace, err)
	}
	fmt.Printf("host: %s\n", config.Host)
	if o.duration > 0 {
		if err := issuance(ctx, config, o); err != nil {
			return err
		}
	}
	if o.secrets > 0 {
		if err := secretDelivery(ctx, config, kube, o); err != nil {
			return err
		}
	}
	if o.requests > 0 {
		if err := memory(ctx, config, o); err != nil {
			return err
		}
	}
	if o.inject > 0 {
		if err := injection(ctx, config, kube, o); err != nil {
			return err
		}
	}
	return nil
}

// injection measures caBundle injection through the running server.
func injection(ctx context.Context, config *rest.Config, kube kubernetes.Interface, o options) error {
	c, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	vwcs := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
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
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("load-inject-%d", i)
		t0 := time.Now()
		if _, err := vwcs.Create(ctx, mk(name), metav1.CreateOptions{}); err != nil {
			return err
		}
		w, err := vwcs.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			if v, ok := ev.Object.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok && len(v.Webhooks[0].ClientConfig.CABundle) > 0 {
				break
			}
		}
		w.Stop()
		lat = append(lat, time.Since(t0))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	fmt.Printf("injection: a new annotated ValidatingWebhookConfiguration holds the bundle after median %s, max %s (%d objects, one at a time)\n",
		pct(lat, 50), lat[len(lat)-1].Round(time.Millisecond), n)

	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := n; i < o.inject; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			_, _ = vwcs.Create(ctx, mk(fmt.Sprintf("load-inject-%d", i)), metav1.CreateOptions{})
		}(i)
	}
	wg.Wait()
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
	ca, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		have, err := allHold(ctx, ca.Status.CABundle)
		return err == nil && have == o.inject, nil
	}); err != nil {
		return fmt.Errorf("waiting for all %d objects to hold the current bundle: %w", o.inject, err)
	}
	patch := fmt.Sprintf(`{"spec":{"forceRotation":"load-%d"}}`, time.Now().UnixNano())
	if _, err := c.CertapiV1alpha1().CertificateAuthorities().Patch(ctx, "default", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("forcing a rotation: %w", err)
	}
	var published time.Time
	var bundle string
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.CertapiV1alpha1().CertificateAuthorities().Get(ctx, "default", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cert := range got.Status.Certificates {
			if cert.Role == certapiv1alpha1.CARoleNext {
				published, bundle = time.Now(), got.Status.CABundle
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		return fmt.Errorf("waiting for the Next CA to be published: %w", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		have, err := allHold(ctx, bundle)
		return err == nil && have == o.inject, nil
	}); err != nil {
		return fmt.Errorf("waiting for all %d objects to hold the bundle with Next: %w", o.inject, err)
	}
	fmt.Printf("injection: all %d opted-in ValidatingWebhookConfigurations hold [Active, Next] %s after Next was published (seen in CertificateAuthority status)\n",
		o.inject, time.Since(published).Round(time.Millisecond))
	return nil
}

// localDir is the --local control plane's directory; it appears in certapi's command line.
var (
	// lastAnon is the anonymous (heap, stacks) part of the last RSS read; the rest maps the binary.
	lastAnon   int64
	localDir   string
	localPlane *framework.ControlPlane
)

// memory creates o.requests ServingCertRequests and reports certapi's resident set size.
func memory(ctx context.Context, config *rest.Config, o options) error {
	if localDir == "" {
		return fmt.Errorf("--requests needs --local: it reads certapi's memory from /proc")
	}
	c, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	scrs := c.CertapiV1alpha1().ServingCertRequests(o.namespace)
	before, err := certapiRSS()
	if err != nil {
		return err
	}
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var failed atomic.Int64
	for i := 0; i < o.requests; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			name := fmt.Sprintf("m%d", i)
			if _, err := scrs.Create(ctx, &certapiv1alpha1.ServingCertRequest{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: name, DNSNames: []string{"*." + name + "." + o.namespace + ".svc"}},
			}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				failed.Add(1)
			}
		}(i)
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d of %d creates failed", n, o.requests)
	}
	// A full list through the API, as a controller's relist would do, then measure.
	if _, err := scrs.List(ctx, metav1.ListOptions{}); err != nil {
		return err
	}
	after, err := certapiRSS()
	if err != nil {
		return err
	}
	// The burst of creates leaves garbage the runtime has not collected or returned yet: run a GC through
	// pprof (?gc=1) and let the scavenger return freed pages, then measure the steady state.
	if err := heapProfile(o.heap); err != nil {
		return err
	}
	idle := time.Now()
	steady := after
	for time.Since(idle) < 30*time.Second {
		time.Sleep(time.Second) // sampling an external process, not synchronisation
		if steady, err = certapiRSS(); err != nil {
			return err
		}
	}
	fmt.Printf("memory: certapi RSS %d MiB before, %d MiB right after creating %d ServingCertRequests (in %s), %d MiB 30 s after a GC (of which %d MiB anonymous: heap and stacks; the rest maps the binary)\n",
		before>>20, after>>20, o.requests, time.Since(start).Round(time.Millisecond), steady>>20, lastAnon>>20)
	return nil
}

// certapiRSS returns the resident set size of the certapi process of the --local control plane.
func certapiRSS() (int64, error) {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		cmdline, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), "certapi") || !strings.Contains(string(cmdline), localDir) || strings.Contains(string(cmdline), "etcd\x00--name") {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if !strings.HasSuffix(args[0], "certapi") {
			continue
		}
		status, err := os.ReadFile("/proc/" + p.Name() + "/status")
		if err != nil {
			continue
		}
		var rss, anon int64
		for _, line := range strings.Split(string(status), "\n") {
			var kb int64
			if strings.HasPrefix(line, "VmRSS:") {
				if _, err := fmt.Sscanf(strings.TrimPrefix(line, "VmRSS:"), "%d", &kb); err == nil {
					rss = kb << 10
				}
			}
			if strings.HasPrefix(line, "RssAnon:") {
				if _, err := fmt.Sscanf(strings.TrimPrefix(line, "RssAnon:"), "%d", &kb); err == nil {
					anon = kb << 10
				}
			}
		}
		if rss > 0 {
			lastAnon = anon
			return rss, nil
		}
	}
	return 0, fmt.Errorf("no certapi process found for %s", localDir)
}

// issuance offers o.rate issuances per second for o.duration and reports latency percentiles.
func issuance(ctx context.Context, config *rest.Config, o options) error {
	var clients []versioned.Interface
	for i := 0; i < o.clients; i++ {
		c := rest.CopyConfig(config)
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
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, c := range clients {
			if _, err := c.CertapiV1alpha1().ServingCertRequests(o.namespace).CreateServingCert(ctx, "load", body, metav1.CreateOptions{}); err != nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}

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
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	fmt.Printf("issuance: offered %.0f/s (concurrency %d, %d clients) for %s: %d ok, %d failed, %.1f certificates/s\n",
		o.rate, o.concurrency, o.clients, o.duration, len(latencies), failures, float64(len(latencies))/elapsed.Seconds())
	if len(latencies) > 0 {
		fmt.Printf("  latency p50 %s  p95 %s  p99 %s  max %s\n", pct(latencies, 50), pct(latencies, 95), pct(latencies, 99), latencies[len(latencies)-1])
	}
	return nil
}

// secretDelivery creates o.secrets requests with secretName and waits until every one is Ready with its Secret.
func secretDelivery(ctx context.Context, config *rest.Config, kube kubernetes.Interface, o options) error {
	c, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	scrs := c.CertapiV1alpha1().ServingCertRequests(o.namespace)
	prefix := fmt.Sprintf("s%d-", time.Now().Unix()%100000)
	start := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	var createErr error
	var mu sync.Mutex
	for i := 0; i < o.secrets; i++ {
		name := fmt.Sprintf("%s%d", prefix, i)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			_, err := scrs.Create(ctx, &certapiv1alpha1.ServingCertRequest{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: name, SecretName: name + "-tls"},
			}, metav1.CreateOptions{})
			if err != nil {
				mu.Lock()
				createErr = err
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if createErr != nil {
		return fmt.Errorf("creating requests: %w", createErr)
	}
	created := time.Since(start)
	// Watch rather than poll: listing hundreds of Secrets every few milliseconds would load kube-apiserver
	// and distort the figure. certapi sets Ready=True only after the Secret is written.
	if err := waitAllReady(ctx, scrs, prefix, o.secrets); err != nil {
		return err
	}
	ready := time.Since(start)
	secrets, err := kube.CoreV1().Secrets(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: "certapi.dev/managed=true"})
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
	return nil
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

// waitAllReady watches the namespace's requests until n of those named with prefix are Ready=True.
func waitAllReady(ctx context.Context, scrs typedv1alpha1.ServingCertRequestInterface, prefix string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	list, err := scrs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ready := map[string]bool{}
	note := func(r *certapiv1alpha1.ServingCertRequest) {
		if strings.HasPrefix(r.Name, prefix) && meta.IsStatusConditionTrue(r.Status.Conditions, "Ready") {
			ready[r.Name] = true
		}
	}
	for i := range list.Items {
		note(&list.Items[i])
	}
	rv := list.ResourceVersion
	for len(ready) < n {
		w, err := scrs.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			return fmt.Errorf("watching requests: %w", err)
		}
		for ev := range w.ResultChan() {
			if r, ok := ev.Object.(*certapiv1alpha1.ServingCertRequest); ok {
				rv = r.ResourceVersion
				note(r)
				if len(ready) >= n {
					break
				}
			}
		}
		w.Stop()
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d requests Ready when the wait ended: %w", len(ready), n, ctx.Err())
		}
	}
	return nil
}

// heapProfile runs a GC in certapi and saves its /debug/pprof/heap to path (discarded when path is "").
func heapProfile(path string) error {
	client, err := localPlane.CertapiHTTPClient()
	if err != nil {
		return err
	}
	client.Timeout = time.Minute
	resp, err := client.Get(localPlane.CertapiURL + "/debug/pprof/heap?gc=1")
	if err != nil {
		return fmt.Errorf("fetching the heap profile: %w", err)
	}
	defer resp.Body.Close()
	if path == "" {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
