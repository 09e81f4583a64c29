package injector_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// scaleTargets is DESIGN.md's rotation target: "every one of 1,000 opted-in webhook configurations
// holds the new bundle within 10 s".
const scaleTargets = 1000

// TestScaleThousandWebhookConfigurations creates scaleTargets opted-in ValidatingWebhookConfigurations,
// lets them be injected, then changes the bundle, calls Trigger, and measures the time until all of
// them hold the new bundle (AllHold, then checked with a List). It logs the figures and asserts
// correctness only, never time (DESIGN.md: speed targets live in benchmarks). It takes about 10 s
// on two cores with kube-apiserver and etcd local, so it runs with the others; -short skips it.
func TestScaleThousandWebhookConfigurations(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the 1,000-object scale test")
	}
	b1 := signertest.Bundle(t, 1)
	e := newEnv(t, b1)
	e.source.quiet = true // only Trigger re-checks
	e.start(nil)
	ctx := context.Background()
	vwcs := e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	const label = "injector.certapi.dev/test"
	t.Cleanup(func() {
		if err := vwcs.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: label + "=scale"}); err != nil {
			t.Errorf("deleting the scale objects: %v", err)
		}
	})

	t0 := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, scaleTargets)
	names := make(chan int)
	for range 16 {
		wg.Go(func() {
			for n := range names {
				o := &admissionregistrationv1.ValidatingWebhookConfiguration{
					ObjectMeta: metav1.ObjectMeta{
						Name:        fmt.Sprintf("scale-%04d", n),
						Labels:      map[string]string{label: "scale"},
						Annotations: map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"},
					},
					Webhooks: []admissionregistrationv1.ValidatingWebhook{{
						Name:                    fmt.Sprintf("w%d.example.com", n),
						ClientConfig:            admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "webhooks", Name: "svc"}},
						SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
						AdmissionReviewVersions: []string{"v1"},
						FailurePolicy:           ptr(admissionregistrationv1.Ignore),
						// Match nothing, so that a thousand unreachable webhooks do not slow the test's writes.
						ObjectSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"injector.certapi.dev/never": "x"}},
					}},
				}
				if _, err := vwcs.Create(ctx, o, metav1.CreateOptions{FieldManager: "owner"}); err != nil {
					errs <- err
				}
			}
		})
	}
	for n := range scaleTargets {
		names <- n
	}
	close(names)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating: %v", err)
	}
	created := time.Since(t0)
	e.waitFor("all injected with the first bundle", 60*time.Second, func(context.Context) (bool, error) {
		s := e.inj.Summary()
		return s.Targets == scaleTargets && s.UpToDate == scaleTargets && e.inj.AllHold(b1), nil
	})
	t.Logf("created %d opted-in ValidatingWebhookConfigurations in %s; all injected %s after the first create", scaleTargets, created, time.Since(t0))

	b2 := append(bytes.Clone(b1), signertest.Bundle(t, 1)...)
	writes := e.writes.patches("")
	e.source.set(b2)
	e.inj.Trigger()
	took := e.waitFor("all to hold the new bundle", 60*time.Second, func(context.Context) (bool, error) { return e.inj.AllHold(b2), nil })
	t.Logf("FIGURE: all %d ValidatingWebhookConfigurations hold the new bundle %s after Trigger (AllHold true); %d writes",
		scaleTargets, took.Round(time.Millisecond), e.writes.patches("")-writes)

	list, err := vwcs.List(ctx, metav1.ListOptions{LabelSelector: label + "=scale"})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, o := range list.Items {
		if bytes.Equal(o.Webhooks[0].ClientConfig.CABundle, b2) {
			held++
		}
	}
	if len(list.Items) != scaleTargets || held != scaleTargets {
		t.Errorf("%d of %d objects hold the new bundle", held, len(list.Items))
	}
	if n := e.writes.patches("") - writes; n != scaleTargets {
		t.Errorf("%d writes for %d objects; want one each", n, scaleTargets)
	}
	t.Logf("total %s", time.Since(t0).Round(time.Millisecond))
}
