package node

import (
	"context"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/framework"
)

const (
	// servedNamespace holds the webhooks of TestServedCertificatesOnNode.
	servedNamespace = "served-node"
	// servedWebhookLabel on a ConfigMap of servedNamespace names the one case's webhook that validates it:
	// each webhook matches only its own ConfigMaps, so that none of them touches anything else.
	servedWebhookLabel = "served.node.certapi.dev/webhook"
	// servedReportingController is the reportingController of the check's Events
	// (docs/served-certificates.md).
	servedReportingController = "certapi.dev/servedcert"
)

// TestServedCertificatesOnNode shows certapi's served certificate check (docs/served-certificates.md) on
// the real node, against webhook pods (the probe image) that kube-apiserver really calls through their
// Services, each webhook in a ValidatingWebhookConfiguration annotated for injection:
//
//   - untrusted: a pod serves a certificate of a CA of the test's own from a Secret: Untrusted, counted in
//     status.served and named in worstTargets, listed by `kubectl certapi check`, a Warning Event, and
//     kube-apiserver's own call fails on it too;
//   - wrongname: a pod serves certapi's certificate for another Service: NameMismatch;
//   - notready: the Service's pod runs and fails its readiness probe: NoEndpoints;
//   - netpol: a NetworkPolicy of the webhook's namespace admits only kube-apiserver's address (found from
//     the webhook's own view of who calls it): kube-apiserver still calls the webhook, certapi's pods
//     cannot reach it and the state is Unreachable, never Untrusted, with the one message naming a
//     NetworkPolicy; a rule for certapi's pods makes it Verified again;
//   - ignore: failurePolicy Ignore and a certificate of another CA: kube-apiserver admits the ConfigMap the
//     webhook should have judged, without calling it, while certapi reports Untrusted;
//   - good: a pod serves certapi's certificate for its Service, delivered into a Secret kubelet mounts:
//     Verified, no Event, and `kubectl wait --for=condition=Serving` on its ServingCertRequest returns.
//
// The node's bridge enforces no NetworkPolicy by itself: the test runs the framework's enforcer
// (ClusterNode.EnforceNetworkPolicies) for its duration. It never filters the node's own traffic (no
// plugin lets a pod block its resident node), and kube-apiserver runs on the node here, so the ipBlock
// for its address is what a cluster whose control plane runs elsewhere would need; what the case shows is
// that certapi's pods, on the pod network, are refused. certapi re-probes every
// --served-check-interval (testServedCheckInterval here), which is what sees a NetworkPolicy change: no
// API event of what certapi watches announces it.
func TestServedCertificatesOnNode(t *testing.T) {
	pluginBinary(t, "kubectl-certapi")
	installCertapi(t)
	start := time.Now()
	kube, certapi := clients(t)
	ctx := context.Background()
	ns := servedNamespace

	enforcer, err := cp.ClusterNode.EnforceNetworkPolicies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := enforcer.Err(); err != nil {
			t.Errorf("the NetworkPolicy enforcer: %v", err)
		}
		if err := enforcer.Stop(); err != nil {
			t.Errorf("stopping the NetworkPolicy enforcer: %v", err)
		}
	})

	kubectl(t, "create", "namespace", ns)
	// Opt the namespace in to Secret delivery, as docs/usage.md says.
	kubectl(t, "create", "rolebinding", "certapi-secret-delivery", "-n", ns, "--clusterrole=certapi:secret-delivery", "--serviceaccount=certapi-system:certapi")
	kubectl(t, "label", "namespace", ns, "certapi.dev/secret-delivery=enabled")

	// The Secrets the pods serve: certapi's for good, netpol and (for another Service) wrongname, delivered
	// by certapi; a CA of the test's own for untrusted and ignore, written by hand.
	other := signertest.NewCA(t, time.Now().Add(-time.Hour), 0)
	for _, svc := range []string{"good", "netpol", "elsewhere"} {
		if _, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Create(ctx, &certapiv1alpha1.ServingCertRequest{
			ObjectMeta: metav1.ObjectMeta{Name: svc},
			Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: svc, SecretName: svc + "-tls"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, svc := range []string{"untrusted", "ignore"} {
		if _, err := kube.CoreV1().Secrets(ns).Create(ctx, secretOfCA(t, other, ns, svc), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Each case's pod, Service and webhook.
	cases := []struct {
		svc, secret string
		unready     bool
		policy      admissionregistrationv1.FailurePolicyType
	}{
		{svc: "untrusted", secret: "untrusted-tls", policy: admissionregistrationv1.Fail},
		{svc: "wrongname", secret: "elsewhere-tls", policy: admissionregistrationv1.Fail},
		{svc: "notready", secret: "good-tls", unready: true, policy: admissionregistrationv1.Fail},
		{svc: "netpol", secret: "netpol-tls", policy: admissionregistrationv1.Fail},
		{svc: "ignore", secret: "ignore-tls", policy: admissionregistrationv1.Ignore},
		{svc: "good", secret: "good-tls", policy: admissionregistrationv1.Fail},
	}
	for _, c := range cases {
		if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: c.svc},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": c.svc},
				Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromString("https")}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.AppsV1().Deployments(ns).Create(ctx, servedProbeDeployment(c.svc, c.secret, c.unready), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The webhook configurations once every Service has its endpoint, ready or (notready) not, so that the
	// first probe finds what the case is about rather than a pod still starting.
	waitFor(t, 3*time.Minute, "every case's Service with its one endpoint", func(ctx context.Context) (bool, string) {
		var states []string
		done := true
		for _, c := range cases {
			ready, notReady, err := serviceEndpoints(ctx, kube, ns, c.svc)
			if err != nil {
				return false, err.Error()
			}
			ok := (ready == 1 && notReady == 0 && !c.unready) || (ready == 0 && notReady == 1 && c.unready)
			done = done && ok
			states = append(states, fmt.Sprintf("%s: %d ready, %d not", c.svc, ready, notReady))
		}
		return done, strings.Join(states, "; ")
	})
	t.Logf("pods serving %s after the namespace was created", time.Since(start).Round(time.Millisecond))
	vwc := map[string]string{}
	for _, c := range cases {
		vwc[c.svc] = servedWebhookConfiguration(t, kube, ns, c.svc, c.policy)
	}

	t.Run("untrusted", func(t *testing.T) {
		note := waitServedEvent(t, kube, vwc["untrusted"], corev1.EventTypeWarning, "Untrusted", 2*time.Minute)
		if want := `signed by "CN=` + other.Certificate.Subject.CommonName + `"`; !strings.Contains(note, want) {
			t.Errorf("the Event says %q; want it to say %q", note, want)
		}
		want := servedWorstTarget("untrusted", "Untrusted")
		if served := waitWorstTarget(t, certapi, want); served.Untrusted < 1 {
			t.Errorf("status.served counts %d Untrusted; want the untrusted webhook counted", served.Untrusted)
		}
		// kubectl certapi check lists it on its served line, as a warning (certapi itself is ready).
		out, err := kubectlErr("certapi", "check")
		if err != nil {
			t.Errorf("kubectl certapi check: %v", err)
		}
		if line := regexp.MustCompile(`(?m)^served certificates\s+WARNING\s+.*$`).FindString(out); !strings.Contains(line, want) {
			t.Errorf("kubectl certapi check does not list %q as a warning:\n%s", want, out)
		}
		// kubectl certapi inspect, through kube-apiserver's pods/portforward to the pod, shows the same.
		out, err = kubectlErr("certapi", "inspect", "vwc/"+vwc["untrusted"])
		if err != nil {
			t.Errorf("kubectl certapi inspect: %v\n%s", err, out)
		}
		for _, want := range []string{"through kube-apiserver's pods/portforward", "(pod " + ns + "/untrusted-", "): Untrusted",
			"issuer CN=" + other.Certificate.Subject.CommonName} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl certapi inspect does not say %q:\n%s", want, out)
			}
		}
		// And kube-apiserver agrees: its call fails the same way.
		err = createLabelledConfigMap(ctx, kube, ns, "untrusted", "untrusted-1")
		if err == nil || !strings.Contains(err.Error(), "x509") {
			t.Errorf("creating a ConfigMap the untrusted webhook validates: %v; want kube-apiserver's x509 failure", err)
		}
	})

	t.Run("wrongname", func(t *testing.T) {
		note := waitServedEvent(t, kube, vwc["wrongname"], corev1.EventTypeWarning, "NameMismatch", 2*time.Minute)
		if want := "wrongname." + ns + ".svc"; !strings.Contains(note, want) {
			t.Errorf("the Event says %q; want it to name %s", note, want)
		}
		err := createLabelledConfigMap(ctx, kube, ns, "wrongname", "wrongname-1")
		if err == nil || !strings.Contains(err.Error(), "x509") {
			t.Errorf("creating a ConfigMap the wrongname webhook validates: %v; want kube-apiserver's x509 failure", err)
		}
	})

	t.Run("notready", func(t *testing.T) {
		note := waitServedEvent(t, kube, vwc["notready"], corev1.EventTypeWarning, "NoEndpoints", 2*time.Minute)
		if want := "no ready endpoint for port 443 (https)"; !strings.Contains(note, want) {
			t.Errorf("the Event says %q; want it to say %q", note, want)
		}
		// The pod is there, running, only not ready.
		if ready, notReady, err := serviceEndpoints(ctx, kube, ns, "notready"); err != nil || ready != 0 || notReady != 1 {
			t.Errorf("Service notready: %d ready endpoints, %d not ready (%v); want its pod there, not ready", ready, notReady, err)
		}
	})

	t.Run("good", func(t *testing.T) {
		out := kubectl(t, "wait", "-n", ns, "--for=condition=Serving", "servingcertrequest/good", "--timeout=2m")
		t.Logf("kubectl wait: %s", strings.TrimSpace(out))
		scr, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, "good", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if c := meta.FindStatusCondition(scr.Status.Conditions, certapiv1alpha1.ConditionServing); c == nil || c.Reason != "Verified" {
			t.Errorf("ServingCertRequest good's Serving condition: %+v; want reason Verified", c)
		}
		admitted(t, kube, ns, "good", "good-1")
		if events := servedEvents(t, kube, vwc["good"]); len(events) > 0 {
			t.Errorf("good was Verified from the start, and yet has Events: %v", events)
		}
	})

	t.Run("ignore", func(t *testing.T) {
		waitServedEvent(t, kube, vwc["ignore"], corev1.EventTypeWarning, "Untrusted", 2*time.Minute)
		// kube-apiserver fails the handshake, skips the webhook and admits what it was there to judge.
		if err := createLabelledConfigMap(ctx, kube, ns, "ignore", "ignore-1"); err != nil {
			t.Errorf("creating a ConfigMap the failurePolicy Ignore webhook validates: %v; want it admitted", err)
		}
		if callers := webhookCallers(t, kube, ns, "ignore"); len(callers) != 0 {
			t.Errorf("the ignore webhook was called by %v; want kube-apiserver to have skipped it", callers)
		}
		waitWorstTarget(t, certapi, servedWorstTarget("ignore", "Untrusted"))
	})

	t.Run("netpol", func(t *testing.T) {
		waitServing(t, ns, "netpol", metav1.ConditionTrue, "Verified", 2*time.Minute)
		// Where does kube-apiserver connect from? The webhook sees it.
		admitted(t, kube, ns, "netpol", "netpol-1")
		callers := webhookCallers(t, kube, ns, "netpol")
		if len(callers) != 1 {
			t.Fatalf("the netpol webhook was called from %v; want kube-apiserver's one address", callers)
		}
		apiserver := callers[0]
		t.Logf("kube-apiserver calls webhook pods from %s (the node's address is %s)", apiserver, cp.ClusterNode.IP)
		hookIP := podIP(t, kube, ns, "app=netpol")
		certapiIP := podIP(t, kube, certapiNamespace, "app.kubernetes.io/name=certapi")

		policy := &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "netpol-webhook"},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "netpol"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: apiserver + "/32"}}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(intstr.FromString("https"))}},
				}},
			},
		}
		policy, err := kube.NetworkingV1().NetworkPolicies(ns).Create(ctx, policy, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		blocked := time.Now()
		waitEnforced(t, enforcer, certapiIP, hookIP, false)
		// kube-apiserver still reaches the webhook (failurePolicy Fail: the create succeeds only if it does).
		if err := createLabelledConfigMap(ctx, kube, ns, "netpol", "netpol-2"); err != nil {
			t.Errorf("creating a ConfigMap the netpol webhook validates, under a policy admitting kube-apiserver: %v", err)
		}
		note := waitServedEvent(t, kube, vwc["netpol"], corev1.EventTypeWarning, "Unreachable", 2*time.Minute)
		t.Logf("Unreachable %s after the NetworkPolicy was created: %s", time.Since(blocked).Round(time.Millisecond), note)
		if !strings.Contains(note, "NetworkPolicy") {
			t.Errorf("the Event says %q; want it to name a NetworkPolicy as a cause", note)
		}
		msg := waitServing(t, ns, "netpol", metav1.ConditionUnknown, "Unreachable", time.Minute)
		if !strings.Contains(msg, "NetworkPolicy") {
			t.Errorf("the Serving condition says %q; want it to name a NetworkPolicy as a cause", msg)
		}
		waitWorstTarget(t, certapi, servedWorstTarget("netpol", "Unreachable"))

		// Admit certapi's pods too: Verified again.
		policy.Spec.Ingress[0].From = append(policy.Spec.Ingress[0].From, networkingv1.NetworkPolicyPeer{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": certapiNamespace}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "certapi"}},
		})
		if _, err := kube.NetworkingV1().NetworkPolicies(ns).Update(ctx, policy, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		admitted := time.Now()
		waitEnforced(t, enforcer, certapiIP, hookIP, true)
		waitServedEvent(t, kube, vwc["netpol"], corev1.EventTypeNormal, "Verified", 2*time.Minute)
		waitServing(t, ns, "netpol", metav1.ConditionTrue, "Verified", time.Minute)
		t.Logf("Verified %s after certapi's pods were admitted", time.Since(admitted).Round(time.Millisecond))
		// Never a trust failure on the way.
		for _, e := range servedEvents(t, kube, vwc["netpol"]) {
			if e.reason != "Unreachable" && e.reason != "Verified" {
				t.Errorf("netpol had an Event %s %s %q; want only Unreachable and Verified", e.typ, e.reason, e.note)
			}
		}
	})
	// Last, as it changes the CA every later test sees.
	t.Run("distrust", func(t *testing.T) { distrustWhileKubeletMounts(t, kube, certapi, vwc["good"]) })
	t.Logf("TestServedCertificatesOnNode took %s (certapi installed before)", time.Since(start).Round(time.Millisecond))
}

// distrustWhileKubeletMounts distrusts the CA while the good webhook's pod serves the Secret certapi
// delivers through a kubelet-mounted volume, and kube-apiserver calls that webhook (failurePolicy Fail)
// twice a second: certapi re-issues the Secret within a second, kubelet writes it into the pod's volume
// only at its next sync, and the distrusted CA must not leave the bundle in between. The distrust waits
// for the endpoint (status.distrust.pendingEndpoints), no call fails, and the gap between the Secret's
// re-issue and the endpoint's move, the time in which kube-apiserver's calls would have failed without the
// wait, is logged.
func distrustWhileKubeletMounts(t *testing.T, kube kubernetes.Interface, certapi versioned.Interface, vwc string) {
	ctx := context.Background()
	ns := servedNamespace
	endpoint := fmt.Sprintf("ValidatingWebhookConfiguration %s webhook good.served.node.certapi.dev: %s:8443", vwc, podIP(t, kube, ns, "app=good"))
	// Calls through kube-apiserver, until the distrust is done and the pod serves the new CA's certificate.
	calls, failed := 0, []string{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			calls++
			if err := createLabelledConfigMap(ctx, kube, ns, "good", fmt.Sprintf("good-distrust-%d", n)); err != nil {
				failed = append(failed, err.Error())
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()

	value := "served-node-kubelet"
	if _, err := certapi.CertapiV1alpha1().CertificateAuthorities().Patch(ctx, certapiv1alpha1.CertificateAuthorityName, "application/merge-patch+json",
		[]byte(`{"spec":{"distrust":"`+value+`"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	var reissued, completed time.Time
	var seenPending bool
	var active string
	waitFor(t, 5*time.Minute, "the distrust complete", func(ctx context.Context) (bool, string) {
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		d := ca.Status.Distrust
		if d == nil || d.Distrust != value {
			return false, "status.distrust not for this distrust yet"
		}
		if d.CompletedAt == nil && d.PendingSecrets == nil && reissued.IsZero() {
			reissued = time.Now()
		}
		if d.CompletedAt == nil && d.PendingEndpoints != nil && slices.Contains(d.PendingEndpoints.Names, endpoint) {
			seenPending = true
		}
		if d.CompletedAt != nil {
			completed = time.Now()
			if d.Completion != certapiv1alpha1.DistrustCompletionReissued {
				t.Errorf("the distrust completed by %s; want Reissued", d.Completion)
			}
			for _, c := range ca.Status.Certificates {
				if c.Role == certapiv1alpha1.CARoleActive {
					active = c.SerialNumber
				}
			}
			return true, ""
		}
		return false, fmt.Sprintf("pending: secrets %+v, replicas %d, endpoints %+v", d.PendingSecrets, d.PendingReplicas, d.PendingEndpoints)
	})
	// The calls go on until the pod serves the new CA's certificate (kubelet rewrote its volume), as the
	// check counts it: a distrust that did not wait for it would have failed the calls in between.
	var moved time.Time
	waitFor(t, 3*time.Minute, "the endpoint counted under the new Active CA "+active, func(ctx context.Context) (bool, string) {
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil || ca.Status.Served == nil {
			return false, fmt.Sprint(err)
		}
		for _, i := range ca.Status.Served.Issuers {
			if i.SerialNumber == active && slices.Contains(i.Names, endpoint) {
				moved = time.Now()
				return true, ""
			}
		}
		return false, fmt.Sprintf("status.served.issuers %+v", ca.Status.Served.Issuers)
	})
	close(stop)
	<-done
	if !seenPending {
		t.Errorf("status.distrust.pendingEndpoints never named %s", endpoint)
	}
	if reissued.IsZero() {
		t.Errorf("the distrust completed before the Secrets it waits for were seen re-issued")
	} else {
		t.Logf("distrust: Secrets re-issued %s after it started, the distrust completed %s after that, and the check counted the kubelet-mounted "+
			"endpoint under the new CA %s after it: without the wait, kube-apiserver's calls to it would have failed from the re-issue to the move",
			reissued.Sub(started).Round(time.Second), completed.Sub(reissued).Round(time.Second), moved.Sub(reissued).Round(time.Second))
	}
	t.Logf("kube-apiserver's calls to the webhook during the distrust: %d, %d failed", calls, len(failed))
	if len(failed) > 0 {
		t.Errorf("%d of %d calls through the webhook failed during the distrust; first: %s", len(failed), calls, failed[0])
	}
	// Still Verified, by the new CA.
	waitServing(t, ns, "good", metav1.ConditionTrue, "Verified", time.Minute)
}

// secretOfCA makes a kubernetes.io/tls Secret <svc>-tls holding a certificate for Service svc of ns that
// ca signed: a CA certapi never heard of (the tool a webhook migrated from, a Secret written by hand).
func secretOfCA(t *testing.T, ca *signer.CA, ns, svc string) *corev1.Secret {
	t.Helper()
	key := signertest.ECKey(t, elliptic.P256())
	leaf, err := ca.Sign(signer.LeafRequest{ServiceName: svc, Namespace: ns, ClusterDomain: framework.ClusterDomain, PublicKey: key.Public(), Duration: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: svc + "-tls"},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       leaf.CertificatePEM,
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		},
	}
}

// servedProbeDeployment runs one probe pod labelled app=name serving HTTPS on its port "https" (8443) from
// the Secret secret, with a readiness probe on /readyz that never passes when unready.
func servedProbeDeployment(name, secret string, unready bool) *appsv1.Deployment {
	d := tlsProbeDeployment(name, secret, map[string]string{"app": name})
	c := &d.Spec.Template.Spec.Containers[0]
	if unready {
		c.Args = append(c.Args, "--unready")
	}
	c.Ports = []corev1.ContainerPort{{Name: "https", ContainerPort: 8443}, {Name: "http", ContainerPort: 8080}}
	c.ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
		PeriodSeconds: 1,
	}
	return d
}

// serviceEndpoints counts the ready and not ready endpoints of Service svc's EndpointSlices.
func serviceEndpoints(ctx context.Context, kube kubernetes.Interface, ns, svc string) (ready, notReady int, err error) {
	list, err := kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return 0, 0, err
	}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				ready++
			} else {
				notReady++
			}
		}
	}
	return ready, notReady, nil
}

// servedWebhookConfiguration creates the ValidatingWebhookConfiguration served-node-<svc>, opted in to
// injection, whose one webhook calls /validate of Service svc of ns for the creation of the ConfigMaps of
// ns labelled servedWebhookLabel=svc, with failure policy policy; it is deleted when the test ends.
func servedWebhookConfiguration(t *testing.T, kube kubernetes.Interface, ns, svc string, policy admissionregistrationv1.FailurePolicyType) string {
	t.Helper()
	name := "served-node-" + svc
	_, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(context.Background(), &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{certapiv1alpha1.AnnotationInjectCABundle: "true"}},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         svc + ".served.node.certapi.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: ns, Name: svc, Path: ptr.To("/validate")}},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{servedWebhookLabel: svc}},
			FailurePolicy:           ptr.To(policy),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(5)),
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// servedWorstTarget is how status.served.worstTargets names the webhook of case svc in state.
func servedWorstTarget(svc, state string) string {
	return fmt.Sprintf("ValidatingWebhookConfiguration served-node-%s webhook %s.served.node.certapi.dev: %s", svc, svc, state)
}

// waitWorstTarget waits until CertificateAuthority/default's status.served.worstTargets names want, and
// returns status.served then.
func waitWorstTarget(t *testing.T, certapi versioned.Interface, want string) certapiv1alpha1.ServedSummary {
	t.Helper()
	var served certapiv1alpha1.ServedSummary
	waitFor(t, time.Minute, "CertificateAuthority/default status.served naming "+want, func(ctx context.Context) (bool, string) {
		ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if ca.Status.Served == nil {
			return false, "no status.served"
		}
		served = *ca.Status.Served
		return slices.Contains(served.WorstTargets, want), fmt.Sprintf("%+v", served)
	})
	return served
}

// createLabelledConfigMap creates ConfigMap name in ns with the label that the webhook of case svc
// validates.
func createLabelledConfigMap(ctx context.Context, kube kubernetes.Interface, ns, svc, name string) error {
	_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{servedWebhookLabel: svc}},
	}, metav1.CreateOptions{})
	return err
}

// admitted creates ConfigMap name for the failurePolicy Fail webhook of case svc, which kube-apiserver
// admits only when it called the webhook and the webhook allowed it. kube-apiserver may still hold the
// configuration as it was before certapi injected the bundle for a moment, so refusals are retried for
// 30 s.
func admitted(t *testing.T, kube kubernetes.Interface, ns, svc, name string) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("kube-apiserver to admit ConfigMap %s through the %s webhook", name, svc), func(ctx context.Context) (bool, string) {
		if err := createLabelledConfigMap(ctx, kube, ns, svc, name); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// webhookCallers returns the addresses the probe pod of case svc saw /validate calls from.
func webhookCallers(t *testing.T, kube kubernetes.Interface, ns, svc string) []string {
	t.Helper()
	ip := podIP(t, kube, ns, "app="+svc)
	body, code, err := framework.HTTPGet(context.Background(), http.DefaultClient, "http://"+ip+":8080/callers")
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET /callers of the %s pod: HTTP %d %q, %v", svc, code, body, err)
	}
	return strings.Fields(body)
}

// podIP returns the IP of the one running pod of ns matching selector.
func podIP(t *testing.T, kube kubernetes.Interface, ns, selector string) string {
	t.Helper()
	pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var ips []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			ips = append(ips, p.Status.PodIP)
		}
	}
	if len(ips) != 1 {
		t.Fatalf("running pods of %s matching %s have IPs %v; want one", ns, selector, ips)
	}
	return ips[0]
}

// waitEnforced waits until the enforcer's rules let (allowed) or stop (!allowed) from opening a
// connection to port 8443 of to.
func waitEnforced(t *testing.T, e *framework.NetworkPolicyEnforcer, from, to string, allowed bool) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("the node's NetworkPolicy rules: %s -> %s:8443 allowed=%v", from, to, allowed), func(context.Context) (bool, string) {
		got, err := e.AllowsTCP(from, to, 8443)
		if err != nil {
			return false, err.Error()
		}
		if err := e.Err(); err != nil {
			return false, err.Error()
		}
		return got == allowed, fmt.Sprintf("allowed=%v", got)
	})
}

// servedEvent is one Event of the check about a webhook configuration.
type servedEvent struct {
	typ, reason, note string
	at                time.Time
}

// servedEvents returns the check's Events about the ValidatingWebhookConfiguration name, oldest first. It
// fails the test when one carries PEM.
func servedEvents(t *testing.T, kube kubernetes.Interface, name string) []servedEvent {
	t.Helper()
	list, err := kube.EventsV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []servedEvent
	for _, ev := range list.Items {
		if ev.ReportingController != servedReportingController || ev.Regarding.Kind != "ValidatingWebhookConfiguration" || ev.Regarding.Name != name {
			continue
		}
		if strings.Contains(ev.Note, "PRIVATE KEY") || strings.Contains(ev.Note, "CERTIFICATE") {
			t.Fatalf("an Event about %s carries PEM: %q", name, ev.Note)
		}
		at := ev.EventTime.Time
		if ev.Series != nil && ev.Series.LastObservedTime.After(at) {
			at = ev.Series.LastObservedTime.Time
		}
		out = append(out, servedEvent{typ: ev.Type, reason: ev.Reason, note: ev.Note, at: at})
	}
	slices.SortStableFunc(out, func(a, b servedEvent) int { return a.at.Compare(b.at) })
	return out
}

// waitServedEvent waits until the newest Event of the check about the ValidatingWebhookConfiguration name
// is of type typ and reason, and returns its note.
func waitServedEvent(t *testing.T, kube kubernetes.Interface, name, typ, reason string, timeout time.Duration) string {
	t.Helper()
	var note string
	waitFor(t, timeout, fmt.Sprintf("a %s Event %s about %s", typ, reason, name), func(context.Context) (bool, string) {
		events := servedEvents(t, kube, name)
		if len(events) == 0 {
			return false, "no Event"
		}
		last := events[len(events)-1]
		note = last.note
		return last.typ == typ && last.reason == reason, fmt.Sprintf("newest: %s %s %q", last.typ, last.reason, last.note)
	})
	return note
}

// waitServing waits until ServingCertRequest name of ns has the Serving condition status and reason, and
// returns its message.
func waitServing(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string, timeout time.Duration) string {
	t.Helper()
	_, certapi := clients(t)
	var msg string
	waitFor(t, timeout, fmt.Sprintf("ServingCertRequest %s/%s Serving=%s %s", ns, name, status, reason), func(ctx context.Context) (bool, string) {
		scr, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(scr.Status.Conditions, certapiv1alpha1.ConditionServing)
		if c == nil {
			return false, "no Serving condition"
		}
		msg = c.Message
		return c.Status == status && c.Reason == reason, fmt.Sprintf("Serving=%s %s: %s", c.Status, c.Reason, c.Message)
	})
	return msg
}
