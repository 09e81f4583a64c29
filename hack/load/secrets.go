package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/certapi/certapi/pkg/apis/certapi"
	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// secretDelivery creates o.secrets requests with secretName and waits until every one is Ready with its Secret.
func (l *loader) secretDelivery(ctx context.Context) error {
	o := l.o
	scrs := l.certapi.CertapiV1alpha1().ServingCertRequests(o.namespace)
	prefix := fmt.Sprintf("s%d-", time.Now().Unix()%100000)
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
		printPhase(before, after, o.secrets, "request")
	}
	return nil
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
