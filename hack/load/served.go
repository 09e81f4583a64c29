package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/test/testhelpers"
)

// servedTimeout bounds the --served phase's waits: the first full view, and one periodic round (the
// check's interval, 2 minutes by default, plus its jitter).
const servedTimeout = 5 * time.Minute

// idleWindow is how long --served measures certapi's CPU time with nothing to check.
const idleWindow = 10 * time.Second

// served measures the served certificate check at o.served targets: n webhook configurations, each
// naming its own Service whose one endpoint is a TLS server of this process presenting a certificate
// certapi issued for that Service. It reports the time from creating the configurations to a full view
// (status.served counting every one Verified) and the CPU time of one periodic round of probes, with
// --local.
func (l *loader) served(ctx context.Context) error {
	o := l.o
	n := o.served
	if l.cp == nil {
		return errors.New("--served needs --local: it runs the webhook servers on this machine")
	}
	host, err := testhelpers.EndpointIP()
	if err != nil {
		return err
	}
	certs, err := l.servedCertificates(ctx, n)
	if err != nil {
		return err
	}
	var handshakes atomic.Int64
	ln, err := tls.Listen("tcp", net.JoinHostPort(host, "0"), &tls.Config{
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			handshakes.Add(1)
			return certs[hello.ServerName], nil
		},
	})
	if err != nil {
		return fmt.Errorf("listening on %s: %w", host, err)
	}
	defer func() { _ = ln.Close() }()
	go testhelpers.AcceptHandshakes(ln)
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	createCtx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	if failed, err := forEachParallel(createCtx, 0, n, func(ctx context.Context, i int) error {
		return l.servedBackend(ctx, servedName(i), host, port)
	}); err != nil {
		return fmt.Errorf("creating %d of %d Services and EndpointSlices failed, the last: %w", failed, n, err)
	}
	// certapi's CPU time with nothing to check, over a fixed window: what the round's figure also holds.
	idle, err := l.cpuTimes()
	if err != nil {
		return err
	}
	idleStart := time.Now()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(idleWindow):
	}
	idleEnd, err := l.cpuTimes()
	if err != nil {
		return err
	}
	idleRate := float64(idleEnd["certapi"]-idle["certapi"]) / float64(time.Since(idleStart))
	before, err := l.scrapeBoth(ctx)
	if err != nil {
		return fmt.Errorf("metrics before the --served phase: %w", err)
	}
	start := time.Now()
	if failed, err := forEachParallel(createCtx, 0, n, func(ctx context.Context, i int) error {
		return l.servedWebhook(ctx, servedName(i))
	}); err != nil {
		return fmt.Errorf("creating %d of %d ValidatingWebhookConfigurations failed, the last: %w", failed, n, err)
	}
	created := time.Since(start)
	var served *certapiv1alpha1.ServedSummary
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, servedTimeout, true, func(ctx context.Context) (bool, error) {
		ca, err := l.certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		served = ca.Status.Served
		return served != nil && served.Verified >= int32(n), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for status.served to count %d webhooks Verified (it holds %+v): %w", n, served, err)
	}
	full := time.Since(start)
	after, err := l.scrapeBoth(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("served: %d webhook configurations created in %s; status.served counts every one Verified %s after the first create (%d handshakes)\n",
		n, created.Round(time.Millisecond), full.Round(time.Millisecond), handshakes.Load())
	printPhase(before, after, n, "target (injection and the first probe)")

	// One periodic round: from now until the server has seen n more handshakes.
	before, mark := after, handshakes.Load()
	roundStart := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, servedTimeout, true, func(context.Context) (bool, error) {
		return handshakes.Load() >= mark+int64(n), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for a periodic round of %d probes (%d seen): %w", n, handshakes.Load()-mark, err)
	}
	after, err = l.scrapeBoth(ctx)
	if err != nil {
		return err
	}
	round := time.Since(roundStart)
	d := float64(after.cpu["certapi"]-before.cpu["certapi"]) / float64(time.Millisecond)
	idleMs := idleRate * float64(round) / float64(time.Millisecond)
	fmt.Printf("served: one periodic round of %d probes took %s of wall time; certapi's CPU time over it %.0f ms, of which %.0f ms is what it spends idle in that time: %.2f ms per probe\n",
		n, round.Round(time.Second), d, idleMs, max(d-idleMs, 0)/float64(n))
	return nil
}

// servedName is the name of the i-th --served request, Service and webhook configuration.
func servedName(i int) string { return "served-" + strconv.Itoa(i) }

// servedCertificates creates a ServingCertRequest for each of n Services and has certapi issue a
// certificate for it through the servingcerts subresource (one key for all: the load measures the
// check, not key generation), keyed by the server name kube-apiserver dials.
func (l *loader) servedCertificates(ctx context.Context, n int) (map[string]*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	csrDER, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, err
	}
	csr := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csrDER}))
	scrs := l.certapi.CertapiV1alpha1().ServingCertRequests(l.o.namespace)
	var mu sync.Mutex
	out := make(map[string]*tls.Certificate, n)
	createCtx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	failed, err := forEachParallel(createCtx, 0, n, func(ctx context.Context, i int) error {
		name := servedName(i)
		if _, err := scrs.Create(ctx, &certapiv1alpha1.ServingCertRequest{
			ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: name},
		}, metav1.CreateOptions{}); err != nil {
			return err
		}
		sc, err := scrs.CreateServingCert(ctx, name, &certapiv1alpha1.ServingCert{Spec: certapiv1alpha1.ServingCertSpec{CertificateRequest: csr}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		block, _ := pem.Decode([]byte(sc.Status.Certificate))
		if block == nil {
			return fmt.Errorf("servingcerts of %s returned no certificate", name)
		}
		mu.Lock()
		out[name+"."+l.o.namespace+".svc"] = &tls.Certificate{Certificate: [][]byte{block.Bytes}, PrivateKey: key}
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("issuing %d of %d certificates failed, the last: %w", failed, n, err)
	}
	return out, nil
}

// servedBackend makes a selector-less Service name and an EndpointSlice whose one ready endpoint is
// host:port, as the EndpointSlice controller writes for a pod (testhelpers.SelectorlessBackend).
func (l *loader) servedBackend(ctx context.Context, name, host string, port int32) error {
	ns := l.o.namespace
	service, slice := testhelpers.SelectorlessBackend(name, host, port, true)
	// Headless: the local stack's Service range (a /24) holds fewer cluster IPs than a load of webhooks,
	// and the check resolves endpoints the same way either way.
	service.Spec.ClusterIP = corev1.ClusterIPNone
	if _, err := l.kube.CoreV1().Services(ns).Create(ctx, service, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Service %s/%s: %w", ns, name, err)
	}
	if _, err := l.kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating EndpointSlice %s/%s: %w", ns, slice.Name, err)
	}
	return nil
}

// servedWebhook creates the annotated ValidatingWebhookConfiguration load-<name> whose one webhook,
// x.load.certapi.dev, calls Service name; it matches no resource that exists
// (testhelpers.OptedInWebhookConfiguration).
func (l *loader) servedWebhook(ctx context.Context, name string) error {
	config := testhelpers.OptedInWebhookConfiguration("load-"+name, "x.load.certapi.dev", l.o.namespace, name)
	if _, err := l.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, config, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ValidatingWebhookConfiguration %s: %w", config.Name, err)
	}
	return nil
}
