package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/test/framework"
)

const (
	// pcrPods is how many pods of the --pcr phase share the PodCertificateRequests (kubelet makes one per
	// podCertificate volume and refresh, so one pod may have several).
	pcrPods = 10
	// pcrNode is the Node the --pcr phase plays the kubelet of.
	pcrNode = "load-node"
	// pcrTimeout bounds the wait for every PodCertificateRequest of --pcr to be answered.
	pcrTimeout = 5 * time.Minute
)

// podCertificates measures the PodCertificateRequest path as kubelet sees it: the load tool plays the
// kubelet of one Node (system:node:load-node, under the Node authorizer and NodeRestriction), makes
// o.pcr PodCertificateRequests at o.pcrRate for pods of a ServiceAccount that a ServingCertRequest allows,
// exactly as kubelet's podcertificate manager makes them, and times each from the moment its create is
// sent to the moment the node's watch (kubelet's informer) sees it Issued.
func (l *loader) podCertificates(ctx context.Context) error {
	o := l.o
	if l.cp == nil {
		return errors.New("--pcr needs --local: the load tool plays a kubelet with a client certificate from the local control plane's CA")
	}
	ctx, cancel := context.WithTimeout(ctx, createTimeout+pcrTimeout)
	defer cancel()
	const request, sa = "pcr-load", "pcr-load"
	scr := &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Name: request},
		Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: request, ServiceAccountNames: []string{sa}},
	}
	if _, err := l.certapi.CertapiV1alpha1().ServingCertRequests(o.namespace).Create(ctx, scr, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ServingCertRequest %s: %w", request, err)
	}
	node, err := l.cp.NewNode(ctx, pcrNode)
	if err != nil {
		return err
	}
	source := corev1.PodCertificateProjection{
		SignerName:      certapiv1alpha1.PodCertificateSignerName,
		KeyType:         "ECDSAP256",
		UserAnnotations: map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: request},
	}
	prefix := fmt.Sprintf("p%d-", time.Now().Unix()%100000)
	pods := make([]*corev1.Pod, pcrPods)
	for i := range pods {
		if pods[i], err = node.CreatePod(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: o.namespace, Name: fmt.Sprintf("%s%d", prefix, i)},
			Spec: corev1.PodSpec{
				ServiceAccountName: sa,
				Containers:         []corev1.Container{{Name: "server", Image: "registry.k8s.io/pause:3.10"}},
				Volumes:            []corev1.Volume{framework.PodCertificateVolume("tls", source, "")},
			},
		}); err != nil {
			return err
		}
	}
	key, err := framework.PodCertificateKey(source.KeyType)
	if err != nil {
		return err
	}
	src := pods[0].Spec.Volumes[0].Projected.Sources[0].PodCertificate

	// Warm up, unmeasured: one request per pod, answered, so that the Node authorizer's graph and
	// NodeRestriction's informers know every pod, and certapi's leader has its caches.
	for _, p := range pods {
		pcr, err := node.CreatePodCertificateRequest(ctx, p, src, key)
		if err != nil {
			return fmt.Errorf("warming up: %w", err)
		}
		if pcr, err = node.WaitPodCertificateRequest(ctx, o.namespace, pcr.Name); err != nil {
			return fmt.Errorf("warming up: %w", err)
		}
		if got := framework.PodCertificateRequestAnswered(pcr); got != certificatesv1.PodCertificateRequestConditionTypeIssued {
			return fmt.Errorf("warming up: PodCertificateRequest %s is %s: %+v", pcr.Name, got, pcr.Status.Conditions)
		}
	}

	before, err := l.scrapeBoth(ctx)
	if err != nil {
		return fmt.Errorf("metrics before the --pcr phase: %w", err)
	}

	// One watch as the node, as kubelet's informer: when each request is seen answered.
	list, err := node.Client.CertificatesV1().PodCertificateRequests(o.namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node.Name).String(),
	})
	if err != nil {
		return fmt.Errorf("listing PodCertificateRequests as node %s: %w", node.Name, err)
	}
	w, err := node.Client.CertificatesV1().PodCertificateRequests(o.namespace).Watch(ctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("spec.nodeName", node.Name).String(),
		ResourceVersion: list.ResourceVersion,
	})
	if err != nil {
		return fmt.Errorf("watching PodCertificateRequests as node %s: %w", node.Name, err)
	}
	defer w.Stop()
	var (
		mu       sync.Mutex
		sent     = map[string]time.Time{}
		answered = map[string]time.Time{}
		states   = map[string]string{}
		all      = make(chan struct{})
	)
	watchDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-ctx.Done():
				watchDone <- ctx.Err()
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					watchDone <- errors.New("the watch of PodCertificateRequests ended early")
					return
				}
				now := time.Now()
				pcr, isPCR := ev.Object.(*certificatesv1.PodCertificateRequest)
				if !isPCR || ev.Type == watch.Deleted {
					continue
				}
				state := framework.PodCertificateRequestAnswered(pcr)
				if state == "" {
					continue
				}
				mu.Lock()
				if _, seen := answered[pcr.Name]; !seen {
					answered[pcr.Name], states[pcr.Name] = now, state
					if len(answered) == o.pcr {
						close(all)
					}
				}
				mu.Unlock()
			}
		}
	}()

	var interval time.Duration
	if o.pcrRate > 0 {
		interval = time.Duration(float64(time.Second) / o.pcrRate)
	}
	start := time.Now()
	var wg sync.WaitGroup
	var createErr error
	sem := make(chan struct{}, createParallelism)
	for n := range o.pcr {
		if interval > 0 {
			// Open loop: the n-th request is due at start + n*interval, however long earlier ones took.
			if d := time.Until(start.Add(time.Duration(n) * interval)); d > 0 {
				time.Sleep(d)
			}
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t0 := time.Now()
			pcr, err := node.CreatePodCertificateRequest(ctx, pods[n%len(pods)], src, key)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				createErr = err
				return
			}
			sent[pcr.Name] = t0
		})
	}
	wg.Wait()
	if createErr != nil {
		return fmt.Errorf("creating PodCertificateRequests: %w", createErr)
	}
	select {
	case <-all:
	case err := <-watchDone:
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	var latencies []time.Duration
	counts := map[string]int{}
	for name, t0 := range sent {
		latencies = append(latencies, answered[name].Sub(t0))
		counts[states[name]]++
	}
	slices.Sort(latencies)
	fmt.Printf("pcr: %d PodCertificateRequests made as node %s at %.0f/s for %d pods: %d Issued, %d Denied, %d Failed\n",
		o.pcr, node.Name, o.pcrRate, len(pods), counts[certificatesv1.PodCertificateRequestConditionTypeIssued],
		counts[certificatesv1.PodCertificateRequestConditionTypeDenied], counts[certificatesv1.PodCertificateRequestConditionTypeFailed])
	fmt.Printf("  created to Issued (as the node's watch sees it): p50 %s  p95 %s  p99 %s  max %s\n",
		pct(latencies, 50), pct(latencies, 95), pct(latencies, 99), latencies[len(latencies)-1])
	after, err := l.scrapeBoth(ctx)
	if err != nil {
		return fmt.Errorf("metrics after the --pcr phase: %w", err)
	}
	printPhase(before, after, o.pcr, "request")
	return nil
}
