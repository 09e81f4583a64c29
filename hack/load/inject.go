package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

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
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}},
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
	ca, err := cas.Get(getCtx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
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
	if _, err := cas.Patch(patchCtx, certapiv1alpha1.CertificateAuthorityName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("forcing a rotation: %w", err)
	}
	var published time.Time
	var bundle string
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, nextTimeout, true, func(ctx context.Context) (bool, error) {
		got, err := cas.Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
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
