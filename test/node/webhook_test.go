package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	webhookNamespace = "example-webhook"
	webhookSelector  = "app.kubernetes.io/name=example-webhook"
)

// TestExampleWebhook runs the example webhook from its own manifests (artifacts/examples/webhook/manifests)
// as pods with pkg/servingcert: first without the RoleBinding that lets them get a certificate, when they
// run, fail their readiness probe and never restart; then with it, when they become Ready, certapi has
// injected its CA into the ValidatingWebhookConfiguration, and kube-apiserver calls the webhook through its
// Service and enforces its answer.
func TestExampleWebhook(t *testing.T) {
	installCertapi(t)
	kube, _ := clients(t)
	ctx := context.Background()
	setImages := map[string]string{"ghcr.io/certapi/example-webhook": images["example-webhook"]}

	withoutRBAC := kustomization(t, "artifacts/examples/webhook/manifests", setImages, `- patch: |-
    $patch: delete
    apiVersion: rbac.authorization.k8s.io/v1
    kind: RoleBinding
    metadata:
      name: example-webhook-serving-cert
      namespace: example-webhook
`)
	kubectl(t, "apply", "-k", withoutRBAC)
	// Both pods run and have failed their readiness probe (kubelet's Unhealthy Event): they are up, have no
	// certificate, and say so.
	waitFor(t, 2*time.Minute, "both webhook pods running and reported not ready by kubelet", func(ctx context.Context) (bool, string) {
		pods, err := kube.CoreV1().Pods(webhookNamespace).List(ctx, metav1.ListOptions{LabelSelector: webhookSelector})
		if err != nil {
			return false, err.Error()
		}
		events, err := kube.CoreV1().Events(webhookNamespace).List(ctx, metav1.ListOptions{FieldSelector: "reason=Unhealthy"})
		if err != nil {
			return false, err.Error()
		}
		unready := map[string]bool{}
		for _, e := range events.Items {
			if strings.Contains(e.Message, "Readiness probe failed") {
				unready[e.InvolvedObject.Name] = true
			}
		}
		n := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && unready[p.Name] {
				n++
			}
		}
		return n == 2 && len(pods.Items) == 2, fmt.Sprintf("%d of %d pods running with a failed readiness probe", n, len(pods.Items))
	})
	pods, err := kube.CoreV1().Pods(webhookNamespace).List(ctx, metav1.ListOptions{LabelSelector: webhookSelector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				t.Errorf("pod %s is Ready without a certificate", p.Name)
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.RestartCount > 0 {
				t.Errorf("pod %s restarted %d times while it had no certificate", p.Name, cs.RestartCount)
			}
		}
	}

	start := time.Now()
	kubectl(t, "apply", "-k", kustomization(t, "artifacts/examples/webhook/manifests", setImages, ""))
	waitFor(t, 2*time.Minute, "both webhook pods Ready", func(ctx context.Context) (bool, string) {
		return podsReady(ctx, kube, webhookNamespace, webhookSelector, 2)
	})
	t.Logf("webhook pods Ready %s after their RoleBinding was applied", time.Since(start).Round(time.Millisecond))

	// kube-apiserver calls the webhook through its Service, trusting the injected bundle.
	ns := "webhook-validated"
	kubectl(t, "create", "namespace", ns)
	kubectl(t, "label", "namespace", ns, "example.certapi.dev/validate=enabled")
	forbidden := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "forbidden", Labels: map[string]string{"example.certapi.dev/forbidden": "true"}}}
	_, err = kube.CoreV1().ConfigMaps(ns).Create(ctx, forbidden, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "denied the request") {
		t.Errorf("creating a forbidden ConfigMap: %v; want the webhook's denial", err)
	}
	if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "allowed"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("creating an allowed ConfigMap: %v", err)
	}
}
