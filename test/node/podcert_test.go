package node

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/test/framework"
)

// TestPodCertificates applies artifacts/examples/pod-certificates with the probe image in place of its
// nginx and curl containers (their volumes, ServiceAccounts, request and Service unchanged): the real
// kubelet makes the key and the PodCertificateRequest of each web pod's podCertificate volume, certapi signs
// it, kubelet writes the credential bundle the server serves; the client pod trusts it through its
// clusterTrustBundle volume and reaches the web Service by name over TLS. kustomize's default order applies
// the ServingCertRequest after the Deployments, so the web pods' requests may wait for it.
func TestPodCertificates(t *testing.T) {
	installCertapi(t)
	kube, _ := clients(t)
	ns := "pod-certificates"
	dir := kustomization(t, "artifacts/examples/pod-certificates", nil, fmt.Sprintf(`- target:
    kind: Deployment
    name: web
  patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/image
      value: %[1]s
    - op: replace
      path: /spec/template/spec/containers/0/args
      value: ["--tls-bundle=/var/run/tls/credentialbundle.pem"]
- target:
    kind: Deployment
    name: client
  patch: |-
    - op: replace
      path: /spec/template/spec/containers/0/image
      value: %[1]s
    - op: remove
      path: /spec/template/spec/containers/0/command
    - op: replace
      path: /spec/template/spec/containers/0/args
      value: []
`, images["probe"]))
	kubectl(t, "apply", "-k", dir)
	start := time.Now()
	waitFor(t, 3*time.Minute, "the web pods Ready with their pod certificates", func(ctx context.Context) (bool, string) {
		return podsReady(ctx, kube, ns, "app.kubernetes.io/name=web", 2)
	})
	t.Logf("web pods Ready %s after `kubectl apply -k`", time.Since(start).Round(time.Millisecond))
	waitFor(t, 2*time.Minute, "the client pod Ready", func(ctx context.Context) (bool, string) {
		return podsReady(ctx, kube, ns, "app.kubernetes.io/name=client", 1)
	})
	ctx := context.Background()
	pcrs, err := kube.CertificatesV1().PodCertificateRequests(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	issued := 0
	for _, p := range pcrs.Items {
		if framework.PodCertificateRequestAnswered(&p) == "Issued" {
			issued++
		}
	}
	if issued < 2 {
		t.Errorf("%d PodCertificateRequests Issued in %s; want one per web pod", issued, ns)
	}

	client, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=client"})
	if err != nil || len(client.Items) != 1 {
		t.Fatalf("the client pod: %v (%d pods)", err, len(client.Items))
	}
	q := url.Values{"url": {"https://web.pod-certificates.svc/healthz"}, "ca": {"/var/run/trust/ca.crt"}}
	get := fmt.Sprintf("http://%s:8080/get?%s", client.Items[0].Status.PodIP, q.Encode())
	// The Service's address answers once kube-proxy has programmed its new endpoints, a moment after the
	// pods are Ready ("no route to host" until then); a certificate the client does not trust fails at once.
	waitFor(t, time.Minute, "the client pod's GET of https://web.pod-certificates.svc/healthz, trusting its clusterTrustBundle volume, to answer 200 ok", func(ctx context.Context) (bool, string) {
		body, code, err := framework.HTTPGet(ctx, http.DefaultClient, get)
		if err == nil && code == http.StatusOK && body == "200\nok\n" {
			return true, ""
		}
		if strings.Contains(body, "x509") || strings.Contains(body, "tls:") {
			t.Fatalf("the client pod's GET of https://web.pod-certificates.svc/healthz, trusting its clusterTrustBundle volume: HTTP %d %q; want 200 ok", code, body)
		}
		return false, fmt.Sprintf("HTTP %d %q, %v", code, body, err)
	})
}
