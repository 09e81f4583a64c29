package e2e

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller/injector"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestTenantConfigMapCannotHoldARotation: a tenant annotates a ConfigMap so close to kube-apiserver's
// 1 MiB limit that the bundle can never fit ("Too long"). certapi reports it as a failed injection
// target (status.injection.failed and failedTargets, a Warning Event on the ConfigMap, the
// injection_targets{state="Failed"} metric), and a forceRotation completes at the rotation grace (2 s
// here) with a normal Switch, not at the forced-switch deadline months away. Before, the gate waited
// for that ConfigMap, and so did every rotation.
func TestTenantConfigMapCannotHoldARotation(t *testing.T) {
	ctx := context.Background()
	own := rotationPlane(t)
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	old := e2etest.ActiveSerial(t, own) // and CertificateAuthority/default exists
	cms := kube.CoreV1().ConfigMaps(ns)
	optIn := map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "trust", Annotations: optIn}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	big := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big", Annotations: optIn},
		Data: map[string]string{"blob": strings.Repeat("x", 1<<20-64)}}
	if _, err := cms.Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	failedName := "ConfigMap " + ns + "/big"
	reportsFailed := func(ca *certapiv1alpha1.CertificateAuthority) bool {
		inj := ca.Status.Injection
		return inj != nil && inj.Failed == 1 && slices.Equal(inj.FailedTargets, []string{failedName})
	}
	e2etest.Eventually(t, 30*time.Second, "the big ConfigMap reported as failed, the other holding the bundle", func(ctx context.Context) (bool, error) {
		cm, err := cms.Get(ctx, "trust", metav1.GetOptions{})
		return err == nil && cm.Data[injector.ConfigMapKey] != "" && reportsFailed(e2etest.CAObject(t, c)), nil
	})
	e2etest.Eventually(t, 30*time.Second, "a Warning Event InjectionFailed on the big ConfigMap", func(ctx context.Context) (bool, error) {
		evs, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range evs.Items {
			if ev.Regarding.Kind == "ConfigMap" && ev.Regarding.Name == "big" && ev.Type == corev1.EventTypeWarning && ev.Reason == injector.ReasonInjectionFailed {
				if strings.Contains(ev.Note, "PRIVATE KEY") || strings.Contains(ev.Note, "BEGIN CERTIFICATE") {
					t.Fatalf("the Event carries PEM: %q", ev.Note)
				}
				return strings.Contains(ev.Note, "Invalid"), nil
			}
		}
		return false, nil
	})
	client, err := own.CertapiHTTPClient()
	if err != nil {
		t.Fatal(err)
	}
	e2etest.Eventually(t, 30*time.Second, `the metric certapi_injection_targets{state="Failed"} 1`, func(ctx context.Context) (bool, error) {
		resp, err := client.Get(own.CertapiURL + "/metrics")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `certapi_injection_targets{state="Failed"} 1`), nil
	})

	start := time.Now()
	patch := fmt.Sprintf(`{"spec":{"forceRotation":"e2e-failed-%d"}}`, start.UnixNano())
	if _, err := c.CertapiV1alpha1().CertificateAuthorities().Patch(ctx, "default", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The grace is 2 s and the forced switch months away: a switch within a minute is the gate passing
	// over the failed ConfigMap.
	e2etest.Eventually(t, 60*time.Second, "the Next CA to become Active", func(context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		return ca.Status.Active != nil && ca.Status.Active.SerialNumber != old, nil
	})
	t.Logf("the new CA signs %s after forceRotation", time.Since(start).Round(time.Millisecond))
	waitCAEvents(t, kube, corev1.EventTypeNormal, "PublishNext", "Switch")
	evs, err := kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		if ev.Regarding.Kind == "CertificateAuthority" && ev.Reason == "ForcedSwitch" {
			t.Errorf("the switch was forced: %q", ev.Note)
		}
	}
	// The ConfigMap that fits holds the new bundle; the big one is still reported, for the new bundle.
	e2etest.Eventually(t, 30*time.Second, "the new bundle in the ConfigMap that fits, the big one still reported", func(ctx context.Context) (bool, error) {
		ca := e2etest.CAObject(t, c)
		cm, err := cms.Get(ctx, "trust", metav1.GetOptions{})
		return err == nil && cm.Data[injector.ConfigMapKey] == ca.Status.CABundle && reportsFailed(ca), nil
	})
}
