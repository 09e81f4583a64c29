package node

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/node/nodetest"
	"github.com/certapi/certapi/test/testhelpers"
)

// The names the operating pages (docs/usage.md, troubleshooting.md, runbooks.md, served-certificates.md,
// operating.md, migration.md) use in their examples, which TestOperatingPages makes so that each block
// runs as written.
const (
	// pagesNamespace is the webhook's namespace; it enforces Pod Security "restricted".
	pagesNamespace = "webhooks"
	// pagesWebhook names the Service, the ServingCertRequest, the Deployment of the webhook's pods and
	// the ValidatingWebhookConfiguration.
	pagesWebhook = "my-webhook"
	// pagesWebhookEntry is the one webhook of the configuration.
	pagesWebhookEntry = "my-webhook.example.com"
	// pagesOldServer names the Deployment, and the Secret it serves, of the tool migrated from
	// (migration.md): a certificate of a CA of its own, in a Secret written by hand.
	pagesOldServer = "my-webhook-certgen"
	// pagesCRD is served-certificates.md's CRD with a conversion webhook.
	pagesCRD = "widgets.example.com"
)

// TestOperatingPages runs the shell blocks of the operating pages as written, read from the pages, on the
// test node after certapi's install, in the order an operator would: a webhook `my-webhook` of namespace
// `webhooks` migrated from another tool with migration.md's cut-over (the old CA kept in the caBundle,
// the server moved, the old CA dropped), then usage.md's plugin examples, what troubleshooting.md,
// runbooks.md and served-certificates.md tell an operator to look at (a webhook whose Service selects the
// old pods again makes it Untrusted), and last the forced rotation and distrust (usage.md and
// operating.md), the renewals and the shell completion. Each subtest asserts what the page says its block
// shows. They depend on each other in order: a failed one makes the later ones fail.
func TestOperatingPages(t *testing.T) {
	pluginBinary(t, "kubectl-certapi")
	pluginBinary(t, "kubectl-create-servingcertrequest")
	installCertapi(t)
	start := time.Now()
	kube, certapi := clients(t)
	ctx := context.Background()
	ns := pagesNamespace
	sh := nodetest.NewDocShell(t, cp)

	// The namespace, restricted as certapi's own, and opted in to Secret delivery (usage.md).
	kubectl(t, "create", "namespace", ns)
	kubectl(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
	kubectl(t, "create", "rolebinding", "certapi-secret-delivery", "-n", ns, "--clusterrole=certapi:secret-delivery", "--serviceaccount=certapi-system:certapi")
	kubectl(t, "label", "namespace", ns, "certapi.dev/secret-delivery=enabled")

	// The tool migrated from: its CA, the webhook's certificate from it in a Secret its pods serve, the
	// Service selecting those pods, and the webhook configuration with its CA in caBundle, not opted in.
	old, err := signer.NewCA(signer.CAOptions{ClusterDomain: framework.ClusterDomain, CommonName: pagesOldServer + "-ca", Now: time.Now().Add(-time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	oldSerial := signer.FormatSerialNumber(old.Certificate.SerialNumber)
	oldSecret := secretOfCA(t, old, ns, pagesWebhook)
	oldSecret.Name = pagesOldServer
	if _, err := kube.CoreV1().Secrets(ns).Create(ctx, oldSecret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: pagesWebhook},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": pagesOldServer},
			Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromString("https")}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, restrictedPod(servedProbeDeployment(pagesOldServer, pagesOldServer, false)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	vwc := testhelpers.OptedInWebhookConfiguration(pagesWebhook, pagesWebhookEntry, ns, pagesWebhook)
	delete(vwc.Annotations, certapiv1alpha1.AnnotationInjectCABundle)
	vwc.Webhooks[0].ClientConfig.CABundle = old.CertificatePEM()
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(context.Background(), pagesWebhook, metav1.DeleteOptions{})
	})
	// endpoint is how status.served names the webhook's endpoint on the pod labelled app=app.
	endpoint := func(t *testing.T, app string) string {
		return fmt.Sprintf("ValidatingWebhookConfiguration %s webhook %s: %s:8443", pagesWebhook, pagesWebhookEntry, podIP(t, kube, ns, "app="+app))
	}

	t.Run("usage create-examples", func(t *testing.T) {
		// Each line is one example; three create the same request, so the test deletes it before each.
		for i, line := range blockLines(t, "docs/usage.md", "create-examples") {
			if strings.Contains(line, " "+pagesWebhook+" -n "+ns+" ") {
				kubectl(t, "delete", "servingcertrequest", "-n", ns, pagesWebhook, "--ignore-not-found", "--wait")
			}
			out := sh.Script(t, fmt.Sprintf("docs/usage.md block create-examples line %d", i+1), 2*time.Minute, line)
			switch {
			case strings.Contains(line, "--dry-run=client"):
				for _, want := range []string{"kind: ServingCertRequest", "'*.db.data.svc'", "serviceName: db"} {
					if !strings.Contains(out, want) {
						t.Errorf("line %d prints no %q:\n%s", i+1, want, out)
					}
				}
				if _, err := certapi.CertapiV1alpha1().ServingCertRequests("data").Get(ctx, "db", metav1.GetOptions{}); err == nil {
					t.Errorf("line %d (--dry-run=client) created ServingCertRequest data/db", i+1)
				}
			default:
				scr, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, pagesWebhook, metav1.GetOptions{})
				if err != nil {
					t.Fatalf("line %d: %v", i+1, err)
				}
				if scr.Spec.ServiceName != pagesWebhook {
					t.Errorf("line %d: spec.serviceName %q; want %s", i+1, scr.Spec.ServiceName, pagesWebhook)
				}
				if strings.Contains(line, "--service-account=") && !slices.Equal(scr.Spec.ServiceAccountNames, []string{pagesWebhook}) {
					t.Errorf("line %d: spec.serviceAccountNames %v; want [%s]", i+1, scr.Spec.ServiceAccountNames, pagesWebhook)
				}
				if strings.Contains(line, "--wait") {
					// --wait returned: the request is Ready and its Secret delivered.
					if _, err := kube.CoreV1().Secrets(ns).Get(ctx, pagesWebhook+"-tls", metav1.GetOptions{}); err != nil {
						t.Errorf("line %d returned before the Secret was delivered: %v", i+1, err)
					}
				}
			}
		}
		if scr, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, pagesWebhook, metav1.GetOptions{}); err != nil || scr.Spec.SecretName != pagesWebhook+"-tls" {
			t.Fatalf("after the examples, ServingCertRequest %s/%s: %v; want the last example's, with the Secret %s-tls (the later blocks need it)", ns, pagesWebhook, err, pagesWebhook)
		}
	})
	// The webhook's new pods, serving the Secret certapi delivers (migration.md step 4's rollout); the
	// Service still selects the old ones.
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, restrictedPod(servedProbeDeployment(pagesWebhook, pagesWebhook+"-tls", false)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Minute, "the old and the new webhook pods Ready", func(ctx context.Context) (bool, string) {
		okOld, msgOld := podsReady(ctx, kube, ns, "app="+pagesOldServer, 1)
		okNew, msgNew := podsReady(ctx, kube, ns, "app="+pagesWebhook, 1)
		return okOld && okNew, msgOld + "; " + msgNew
	})

	t.Run("migration cut-over", func(t *testing.T) {
		// Step 2: both annotations in one command.
		sh.Run(t, "docs/migration.md", time.Minute, "annotate-keep")
		var caSerials []string
		waitFor(t, time.Minute, "the caBundle holding certapi's CAs followed by the old one", func(ctx context.Context) (bool, string) {
			caSerials = bundleSerials(t, []byte(currentCA(ctx, t, certapi).Status.CABundle))
			got := webhookBundleSerials(ctx, t, kube)
			return slices.Equal(got, append(slices.Clone(caSerials), oldSerial)), fmt.Sprintf("caBundle CAs %v, certapi's %v, the old %s", got, caSerials, oldSerial)
		})
		waitFor(t, time.Minute, "a KeepingForeignCA Event about "+pagesWebhook, func(ctx context.Context) (bool, string) {
			return hasEvent(ctx, kube, "KeepingForeignCA", pagesWebhook)
		})
		// Step 3: the Event, and the count the comment says.
		out := sh.Run(t, "docs/migration.md", time.Minute, "keeping-foreign-ca")
		if !strings.Contains(out, "KeepingForeignCA") || !strings.Contains(out, pagesOldServer+"-ca") {
			t.Errorf("the block does not show the KeepingForeignCA Event naming the old CA (CN=%s-ca):\n%s", pagesOldServer, out)
		}
		if lines := strings.Fields(out); len(lines) == 0 || lines[len(lines)-1] != strconv.Itoa(len(caSerials)+1) {
			t.Errorf("the block counts %v certificates; want certapi's %d and the old one, %d:\n%s", lines[len(lines)-1:], len(caSerials), len(caSerials)+1, out)
		}

		// Step 4: before the server moves, the check counts its endpoint under the old CA...
		waitIssuer(t, certapi, oldSerial, endpoint(t, pagesOldServer))
		out = sh.Run(t, "docs/migration.md", time.Minute, "served-issuers")
		if !issuerLists(out, oldSerial, endpoint(t, pagesOldServer)) {
			t.Errorf("the block does not list %q under the old CA %s:\n%s", endpoint(t, pagesOldServer), oldSerial, out)
		}
		// ... and once the Service selects the pods serving certapi's certificate, under certapi's Active CA.
		selectPods(t, kube, pagesWebhook)
		active := activeSerial(currentCA(ctx, t, certapi))
		waitIssuer(t, certapi, active, endpoint(t, pagesWebhook))
		out = sh.Run(t, "docs/migration.md", time.Minute, "served-issuers")
		if !issuerLists(out, active, endpoint(t, pagesWebhook)) || issuerLists(out, oldSerial, endpoint(t, pagesOldServer)) {
			t.Errorf("the block does not list %q under certapi's Active CA %s alone:\n%s", endpoint(t, pagesWebhook), active, out)
		}

		// Step 5, written inline on the page: the keep annotation removed, certapi's bundle alone.
		kubectl(t, "annotate", "validatingwebhookconfiguration", pagesWebhook, certapiv1alpha1.AnnotationKeepForeignCA+"-")
		waitFor(t, time.Minute, "the caBundle holding certapi's CAs alone", func(ctx context.Context) (bool, string) {
			want := bundleSerials(t, []byte(currentCA(ctx, t, certapi).Status.CABundle))
			got := webhookBundleSerials(ctx, t, kube)
			return slices.Equal(got, want), fmt.Sprintf("caBundle CAs %v, certapi's %v", got, want)
		})
	})

	// served-certificates.md's CRD with a conversion webhook, served by the same Service.
	crdFile := filepath.Join(t.TempDir(), "crd.yaml")
	if err := os.WriteFile(crdFile, []byte(pagesCRDManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-f", crdFile)
	t.Cleanup(func() { _, _ = kubectlErr("delete", "crd", pagesCRD, "--ignore-not-found", "--wait=false") })
	verifiedLine := regexp.MustCompile(`Endpoint \S+:8443 \(pod ` + ns + `/` + pagesWebhook + `-[^)]+\): Verified`)

	t.Run("verified", func(t *testing.T) {
		active := activeSerial(currentCA(ctx, t, certapi))
		waitIssuer(t, certapi, active, fmt.Sprintf("CustomResourceDefinition %s: %s:8443", pagesCRD, podIP(t, kube, ns, "app="+pagesWebhook)))

		out := sh.Run(t, "docs/served-certificates.md", time.Minute, "inspect-examples")
		jsonAt := strings.LastIndex(out, "\n{")
		if jsonAt < 0 {
			t.Fatalf("the block prints no JSON report:\n%s", out)
		}
		text, report := out[:jsonAt], out[jsonAt:]
		for _, want := range []string{"ValidatingWebhookConfiguration " + pagesWebhook, "CustomResourceDefinition " + pagesCRD, "directly (--direct)",
			"verified by the caBundle's CA " + active} {
			if !strings.Contains(text, want) {
				t.Errorf("kubectl certapi inspect does not say %q:\n%s", want, text)
			}
		}
		if n := len(verifiedLine.FindAllString(text, -1)); n != 2 {
			t.Errorf("kubectl certapi inspect shows %d of the webhook's endpoints Verified; want one for the VWC and one for the CRD:\n%s", n, text)
		}
		var r struct {
			Kind, Name string
			Slots      []struct {
				Endpoints []struct{ Address, State string }
			}
		}
		if err := json.Unmarshal([]byte(report), &r); err != nil {
			t.Fatalf("kubectl certapi inspect apiservice/... -o json: %v\n%s", err, report)
		}
		if r.Kind != "APIService" || r.Name != "v1alpha1.certapi.dev" || len(r.Slots) != 1 || len(r.Slots[0].Endpoints) == 0 {
			t.Errorf("the JSON report: %+v; want APIService v1alpha1.certapi.dev with one slot and its endpoints", r)
		}
		for _, s := range r.Slots {
			for _, e := range s.Endpoints {
				if e.State != "Verified" {
					t.Errorf("certapi's own endpoint %s: %s; want Verified", e.Address, e.State)
				}
			}
		}

		out = sh.Run(t, "docs/troubleshooting.md", 2*time.Minute, "start-with")
		for _, want := range []string{"served certificates", active, pagesWebhook, `"issuers"`} {
			if !strings.Contains(out, want) {
				t.Errorf("troubleshooting.md's first commands do not show %q:\n%s", want, out)
			}
		}
		out = sh.Run(t, "docs/troubleshooting.md", time.Minute, "inspect-webhook")
		if !verifiedLine.MatchString(out) {
			t.Errorf("kubectl certapi inspect does not show the endpoint Verified:\n%s", out)
		}
		out = sh.Run(t, "docs/runbooks.md", 2*time.Minute, "first-two")
		if !strings.Contains(out, active) {
			t.Errorf("runbooks.md's two commands do not show the Active CA %s:\n%s", active, out)
		}
		out = sh.Run(t, "docs/served-certificates.md", time.Minute, "distrust-fields")
		if !strings.Contains(out, endpoint(t, pagesWebhook)) {
			t.Errorf("status.served.issuers does not name %q:\n%s", endpoint(t, pagesWebhook), out)
		}
	})

	t.Run("untrusted", func(t *testing.T) {
		// The Service selects the wrong pods: the old tool's, which present a CA the bundle no longer holds
		// (runbooks.md, CertapiServedCertificateRejected).
		selectPods(t, kube, pagesOldServer)
		waitWorstTarget(t, certapi, fmt.Sprintf("ValidatingWebhookConfiguration %s webhook %s: Untrusted", pagesWebhook, pagesWebhookEntry))
		waitServedEvent(t, kube, pagesWebhook, corev1.EventTypeWarning, "Untrusted", time.Minute)
		out := sh.Run(t, "docs/runbooks.md", time.Minute, "served-rejected")
		for _, want := range []string{"(pod " + ns + "/" + pagesOldServer + "-", "): Untrusted", "issuer CN=" + pagesOldServer + "-ca", "Untrusted"} {
			if !strings.Contains(out, want) {
				t.Errorf("runbooks.md's commands do not show %q:\n%s", want, out)
			}
		}
		out = sh.Run(t, "docs/served-certificates.md", time.Minute, "events")
		if n := strings.Count(out, "Untrusted"); n < 2 || !strings.Contains(out, "validatingwebhookconfiguration/"+pagesWebhook) {
			t.Errorf("served-certificates.md's event commands do not list the Untrusted Event about %s twice:\n%s", pagesWebhook, out)
		}
		// Fixed: the Service selects the right pods again.
		selectPods(t, kube, pagesWebhook)
		waitServedEvent(t, kube, pagesWebhook, corev1.EventTypeNormal, "Verified", time.Minute)
	})

	t.Run("rotate and distrust", func(t *testing.T) {
		// operating.md's two commands are usage.md's, which run once, below.
		tour := commandLines(nodetest.Block(t, "docs/usage.md", "plugin-tour"))
		for _, c := range commandLines(nodetest.Block(t, "docs/operating.md", "rotate-distrust")) {
			if !slices.Contains(tour, c) {
				t.Errorf("docs/operating.md block rotate-distrust: %q is not a command of docs/usage.md block plugin-tour, which runs it", c)
			}
		}
		before := currentCA(ctx, t, certapi)
		out := sh.Run(t, "docs/usage.md", 10*time.Minute, "plugin-tour")
		for _, want := range []string{"patched: spec.forceRotation=", "patched: spec.distrust=", "servingcertrequest.certapi.dev/" + ns + "/" + pagesWebhook + " renewal requested",
			pagesWebhook + "." + ns + ".svc", "ValidatingWebhookConfiguration " + pagesWebhook} {
			if !strings.Contains(out, want) {
				t.Errorf("usage.md's kubectl certapi commands do not show %q:\n%s", want, out)
			}
		}
		after := currentCA(ctx, t, certapi)
		gone := bundleSerials(t, []byte(before.Status.CABundle))
		for _, s := range bundleSerials(t, []byte(after.Status.CABundle)) {
			if slices.Contains(gone, s) {
				t.Errorf("after rotate and distrust, the bundle still holds CA %s of before them", s)
			}
		}
	})

	t.Run("usage renew-examples", func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() {
				// What certapi reported about the request, and what the Secret holds (a refused write shows
				// only in certapi's log, which the framework keeps).
				out, _ := kubectlErr("get", "servingcertrequest", "-n", ns, pagesWebhook, "-o", "jsonpath={.metadata.annotations}{\"\\n\"}{.status.conditions}")
				t.Logf("ServingCertRequest %s/%s: %s", ns, pagesWebhook, out)
				out, _ = kubectlErr("get", "secret", "-n", ns, pagesWebhook+"-tls", "-o", "jsonpath={.metadata.annotations}")
				t.Logf("Secret %s/%s-tls annotations: %s", ns, pagesWebhook, out)
			}
		})
		// The third example selects by label: the request carries the one it names.
		kubectl(t, "label", "servingcertrequest", "-n", ns, pagesWebhook, "app=my-operator")
		secret, err := kube.CoreV1().Secrets(ns).Get(ctx, pagesWebhook+"-tls", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out := sh.Run(t, "docs/usage.md", 2*time.Minute, "renew-examples")
		if n := strings.Count(out, pagesWebhook+" renewal requested"); n != 3 {
			t.Errorf("the three examples requested %d renewals of %s; want 3:\n%s", n, pagesWebhook, out)
		}
		waitFor(t, time.Minute, "the Secret re-issued for the last renewal", func(ctx context.Context) (bool, string) {
			scr, err := certapi.CertapiV1alpha1().ServingCertRequests(ns).Get(ctx, pagesWebhook, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			s, err := kube.CoreV1().Secrets(ns).Get(ctx, pagesWebhook+"-tls", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			asked, answered := scr.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt], s.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt]
			return asked != "" && asked == answered && string(s.Data[corev1.TLSCertKey]) != string(secret.Data[corev1.TLSCertKey]),
				fmt.Sprintf("requested %q, the Secret answers %q", asked, answered)
		})
	})

	t.Run("usage completion", func(t *testing.T) {
		// A krew install made ~/.krew/bin; HOME is the test's.
		home := t.TempDir()
		if err := os.MkdirAll(filepath.Join(home, ".krew", "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		sh.Setenv("HOME", home)
		sh.Run(t, "docs/usage.md", time.Minute, "completion")
		// kubectl completes `kubectl certapi <TAB>` through the script the block wrote, on PATH as krew's
		// bin directory is.
		out := sh.Script(t, "kubectl __complete certapi ''", time.Minute, `PATH="$HOME/.krew/bin:$PATH" kubectl __complete certapi ''`)
		for _, want := range []string{"rotate", "distrust", "renew", "inspect"} {
			if !regexp.MustCompile(`(?m)^` + want + `\b`).MatchString(out) {
				t.Errorf("kubectl's completion of `kubectl certapi ` offers no %s:\n%s", want, out)
			}
		}
	})
	t.Logf("TestOperatingPages took %s (certapi installed before)", time.Since(start).Round(time.Millisecond))
}

// pagesCRDManifest is served-certificates.md's CRD widgets.example.com, opted in to injection, whose
// conversion webhook is my-webhook's Service.
const pagesCRDManifest = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
  annotations:
    certapi.dev/inject-ca-bundle: "true"
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: ["v1"]
      clientConfig:
        service: {name: my-webhook, namespace: webhooks, path: /convert}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}
  - {name: v2, served: true, storage: false, schema: {openAPIV3Schema: {type: object}}}
`

// restrictedPod makes d's pods meet Pod Security "restricted", as the pages' namespace enforces.
func restrictedPod(d *appsv1.Deployment) *appsv1.Deployment {
	spec := &d.Spec.Template.Spec
	spec.SecurityContext = &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To(int64(65532)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
	for i := range spec.Containers {
		spec.Containers[i].SecurityContext = &corev1.SecurityContext{AllowPrivilegeEscalation: ptr.To(false),
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}
	}
	return d
}

// blockLines returns the commands of page's block name, one a line, for a block each of whose lines is
// one example.
func blockLines(t *testing.T, page, name string) []string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(nodetest.Block(t, page, name), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// commandLines returns the commands of a block, one a line, without comments and with spaces
// normalised.
func commandLines(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		l, _, _ = strings.Cut(l, "#")
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// selectPods points the webhook's Service at the pods labelled app=app.
func selectPods(t *testing.T, kube kubernetes.Interface, app string) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"selector":{"app":%q}}}`, app)
	if _, err := kube.CoreV1().Services(pagesNamespace).Patch(context.Background(), pagesWebhook, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// currentCA reads CertificateAuthority/default.
func currentCA(ctx context.Context, t *testing.T, certapi versioned.Interface) *certapiv1alpha1.CertificateAuthority {
	t.Helper()
	ca, err := certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// activeSerial is the serial of ca's Active CA.
func activeSerial(ca *certapiv1alpha1.CertificateAuthority) string {
	for _, c := range ca.Status.Certificates {
		if c.Role == certapiv1alpha1.CARoleActive {
			return c.SerialNumber
		}
	}
	return ""
}

// bundleSerials returns the serials of the certificates of a PEM bundle, in order.
func bundleSerials(t *testing.T, bundle []byte) []string {
	t.Helper()
	var serials []string
	for {
		var b *pem.Block
		if b, bundle = pem.Decode(bundle); b == nil {
			return serials
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("a certificate of a caBundle: %v", err)
		}
		serials = append(serials, signer.FormatSerialNumber(c.SerialNumber))
	}
}

// webhookBundleSerials returns the serials of the caBundle of the pages' webhook.
func webhookBundleSerials(ctx context.Context, t *testing.T, kube kubernetes.Interface) []string {
	t.Helper()
	c, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, pagesWebhook, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return bundleSerials(t, c.Webhooks[0].ClientConfig.CABundle)
}

// hasEvent says whether an Event of reason is about the object named name, in any namespace.
func hasEvent(ctx context.Context, kube kubernetes.Interface, reason, name string) (bool, string) {
	list, err := kube.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "reason=" + reason + ",involvedObject.name=" + name})
	if err != nil {
		return false, err.Error()
	}
	return len(list.Items) > 0, fmt.Sprintf("%d Events", len(list.Items))
}

// waitIssuer waits until CertificateAuthority/default's status.served.issuers names endpoint under the CA
// serial.
func waitIssuer(t *testing.T, certapi versioned.Interface, serial, endpoint string) {
	t.Helper()
	waitFor(t, 2*time.Minute, fmt.Sprintf("status.served.issuers naming %q under CA %s", endpoint, serial), func(ctx context.Context) (bool, string) {
		ca := currentCA(ctx, t, certapi)
		if ca.Status.Served == nil {
			return false, "no status.served"
		}
		for _, i := range ca.Status.Served.Issuers {
			if i.SerialNumber == serial && slices.Contains(i.Names, endpoint) {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", ca.Status.Served.Issuers)
	})
}

// issuerLists says whether the output of migration.md's served-issuers block (serial, a tab, the names)
// lists endpoint under serial.
func issuerLists(out, serial, endpoint string) bool {
	for _, l := range strings.Split(out, "\n") {
		if s, names, ok := strings.Cut(l, "\t"); ok && s == serial && strings.Contains(names, endpoint) {
			return true
		}
	}
	return false
}
