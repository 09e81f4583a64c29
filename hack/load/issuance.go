package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
)

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

	var before phaseMetrics
	if l.cp != nil {
		if before, err = l.scrapeBoth(ctx); err != nil {
			return fmt.Errorf("metrics before the issuance phase: %w", err)
		}
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
	if l.cp != nil && len(latencies) > 0 {
		after, err := l.scrapeBoth(ctx)
		if err != nil {
			return fmt.Errorf("metrics after the issuance phase: %w", err)
		}
		printPhase(before, after, len(latencies), "issuance")
	}
	return nil
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
