// Command local-up is certapi's local demo. It runs etcd, kube-apiserver and certapi as processes on
// loopback (test/framework), with certapi registered through an APIService whose caBundle certapi injects
// itself; makes a ServingCertRequest with the kubectl plugin; starts the example webhook of
// artifacts/examples/webhook, which gets its serving certificate from certapi through pkg/servingcert; has
// certapi inject the webhook's caBundle; shows kube-apiserver calling the webhook and enforcing its
// decision; and has certapi answer a PodCertificateRequest made as a kubelet makes it. It prints that as a short walkthrough (logs go to files), then runs until SIGINT or SIGTERM
// and stops everything it started.
//
// With --node (make local-up NODE=1) the control plane gets a real node (test/framework's Options.Node:
// containerd, kubelet, kube-proxy, kube-controller-manager, kube-scheduler, CoreDNS; it needs root and the
// images of `make images`), and certapi runs as a pod, installed the way a user installs it, from
// artifacts/deploy/overlays/single-replica (framework's InstallCertapiSingleReplica), instead of as a
// process. The example webhook then runs as users run it too, as the pods of its own manifests
// (artifacts/examples/webhook/manifests, with the image example-webhook.tar of `make images`) behind its
// Service: a node's kube-apiserver runs with --enable-aggregator-routing=true, which resolves a webhook's
// Service through its endpoints and refuses an ExternalName Service (k8s.io/apiserver
// proxy.ResolveEndpoint), so the process-and-ExternalName stand-in of the loopback walkthrough cannot be
// called there. The walkthrough is otherwise the same. With --node --ha (make local-up NODE=1 HA=1) certapi is installed
// from artifacts/deploy/base instead, what the Helm chart installs by default: three replicas in a
// StatefulSet whose embedded etcd members form one etcd cluster, all three on the one node
// (InstallCertapiHA). --workers=N (make local-up NODE=3 HA=1) adds N worker nodes (Options.WorkerNodes),
// each in a network namespace of its own, and certapi's replicas run on them, each with its local volume.
//
// hack/local-up.sh (make local-up) builds what it needs into _output/bin and runs it. The line
// "certapi local-up: ready" (readyMarker) is printed once everything is up; tests wait for it.
package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationv1helper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/framework"
)

// readyMarker is printed, alone on its line, once the walkthrough is done and everything runs.
const readyMarker = "certapi local-up: ready"

// The example's names, as in artifacts/examples/webhook/manifests.
const (
	exampleDir       = "artifacts/examples/webhook"
	webhookNamespace = "example-webhook"
	webhookName      = "example-webhook" // the ServiceAccount, ServingCertRequest, Service and VWC
	webhookBinary    = "example-webhook" // in the bin directory, built by hack/local-up.sh
	webhookImage     = "example-webhook.tar"
	webhookImageName = "ghcr.io/certapi/example-webhook" // the image the example's manifests name
	webhookSelector  = "app.kubernetes.io/name=example-webhook"
	webhookReplicas  = 2 // manifests/deployment.yaml's
	pluginBinary     = "kubectl-create-servingcertrequest"
	adminPlugin      = "kubectl-certapi"
	demoNamespace    = "demo"
	validateLabel    = "example.certapi.dev/validate"
)

// Step 6's pod certificate: certapi's signer, the ClusterTrustBundle it keeps, and the Node the pod is
// bound to (no kubelet runs; local-up plays its part).
const (
	podCertSigner = certapiv1alpha1.PodCertificateSignerName
	podCertBundle = certapiv1alpha1.ClusterTrustBundleName
	podCertNode   = "local-node"
)

// rotationGrace is certapi's --rotation-grace here: no kubelet has to propagate a Secret's ca.crt, and a
// forced rotation (one of the things to try) should complete while one watches.
const rotationGrace = 10 * time.Second

// Deadlines of the steps after the control plane is up; each normally takes well under a second.
const (
	stepTimeout      = time.Minute
	podsTimeout      = 3 * time.Minute // the example webhook's pods to be scheduled, started and Ready, with --node
	pollInterval     = 50 * time.Millisecond
	webhookStopGrace = 15 * time.Second
)

func main() {
	dir := flag.String("dir", filepath.Join("_output", "local"), "Directory for the stack's PKI, data, logs and kubeconfig; emptied at start.")
	bin := flag.String("bin-dir", "", "Directory holding example-webhook, kubectl-create-servingcertrequest and kubectl-certapi (and kubectl, else kubectl is looked up on PATH). Default: <repository>/_output/bin.")
	node := flag.Bool("node", false, "Also run a real node (containerd, kubelet, kube-proxy, kube-controller-manager, kube-scheduler, CoreDNS; needs root and `make images`) and install certapi on it as a pod from artifacts/deploy/overlays/single-replica, instead of running it as a process.")
	ha := flag.Bool("ha", false, "With --node: install the highly available default instead, artifacts/deploy/base: three certapi replicas whose embedded etcd members form one etcd cluster, on the one node (or one on each worker, with --workers).")
	workers := flag.Int("workers", 0, "With --node: that many worker nodes besides the first, each in a network namespace of its own with its containerd, kubelet and kube-proxy (make local-up NODE=3 runs three); certapi's pods and the example webhook's run on them, the first node keeps the control plane's (CoreDNS).")
	flag.Parse()
	if *ha && !*node {
		fmt.Fprintln(os.Stderr, "local-up: --ha installs certapi on the node: give --node too (make local-up NODE=3 HA=1)")
		os.Exit(2)
	}
	if *workers < 0 || (*workers > 0 && !*node) {
		fmt.Fprintln(os.Stderr, "local-up: --workers=N (N >= 1) adds worker nodes to the node: give --node too (make local-up NODE=3 HA=1)")
		os.Exit(2)
	}
	if err := run(*dir, *bin, *node, *ha, *workers); err != nil {
		fmt.Fprintf(os.Stderr, "local-up: %v\n", err)
		os.Exit(1)
	}
}

func run(dirFlag, binFlag string, node, ha bool, workers int) error {
	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(dirFlag)
	if err != nil {
		return err
	}
	bin := binFlag
	if bin == "" {
		bin = filepath.Join(root, "_output", "bin")
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return err
	}
	for _, b := range []string{webhookBinary, pluginBinary, adminPlugin} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return fmt.Errorf("%s: %w (hack/local-up.sh builds it)", filepath.Join(bin, b), err)
		}
	}
	kubectl := filepath.Join(bin, "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		if kubectl, err = exec.LookPath("kubectl"); err != nil {
			return fmt.Errorf("no kubectl in %s or on PATH: run `make tools`", bin)
		}
	}
	// Each run starts from nothing: a new PKI would not match an old etcd's objects.
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("emptying %s: %w", dir, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := &demo{root: root, dir: dir, bin: bin, kubectl: kubectl, out: os.Stdout, node: node, ha: ha, workers: workers}
	defer d.stop()
	if err := d.up(ctx); err != nil {
		if ctx.Err() != nil {
			fmt.Fprintln(d.out, "\ninterrupted; stopping what was started")
			return nil
		}
		return err
	}
	<-ctx.Done()
	stop() // a second Ctrl-C ends local-up at once (its children die with it)
	if d.node {
		fmt.Fprintln(d.out, "\nstopping the example webhook, the node (its pods, certapi's among them), kube-apiserver and etcd ...")
	} else {
		fmt.Fprintln(d.out, "\nstopping the example webhook, certapi, kube-apiserver and etcd ...")
	}
	t0 := time.Now()
	d.stop()
	fmt.Fprintf(d.out, "stopped in %s; state and logs are kept in %s\n", since(t0), d.show(dir))
	if d.node && d.cp != nil {
		var left []string
		for _, n := range append([]*framework.ClusterNode{d.cp.ClusterNode}, d.cp.Workers...) {
			if l := n.Leftovers(); len(l) > 0 {
				left = append(left, fmt.Sprintf("node %s: %v", n.Name, l))
			}
		}
		if len(left) > 0 {
			return fmt.Errorf("the nodes left on the machine: %s", strings.Join(left, "; "))
		}
	}
	return nil
}

// demo is one run of the walkthrough and what it started.
type demo struct {
	root, dir, bin, kubectl string
	out                     io.Writer
	// node runs a real node and certapi as a pod on it (--node).
	node bool
	// ha installs artifacts/deploy/base on the node, three replicas, instead of the single replica (--ha).
	ha bool
	// workers is the number of worker nodes beside the first (--workers).
	workers int

	cp       *framework.ControlPlane
	progress *os.File
	kube     kubernetes.Interface
	certapi  versioned.Interface
	caBundle []byte

	webhook     *framework.Process
	webhookPort int
	stopOnce    sync.Once
	stopping    atomic.Bool
}

func (d *demo) up(ctx context.Context) error {
	if d.node {
		fmt.Fprintf(d.out, "certapi local-up: etcd and kube-apiserver on 127.0.0.1 with a node (containerd, kubelet, kube-proxy, CoreDNS),\n"+
			"certapi as %s from %s, then the example webhook of %s.\n", d.certapiPods(), d.kustomization(), exampleDir)
	} else {
		fmt.Fprintf(d.out, "certapi local-up: etcd, kube-apiserver and certapi on 127.0.0.1, then the example webhook of %s.\n", exampleDir)
	}
	fmt.Fprintf(d.out, "Logs: %s\n\n", d.show(filepath.Join(d.dir, "logs")))
	steps := []func(context.Context) error{d.controlPlane, d.request, d.startWebhook, d.register, d.enforce, d.podCertificate, d.status}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return err
		}
		fmt.Fprintln(d.out)
	}
	d.whatNext()
	if d.node {
		fmt.Fprintln(d.out, "Ctrl-C stops the example webhook, the node and its pods (certapi's among them), kube-apiserver and etcd,")
		fmt.Fprintln(d.out, "and removes what the node added to the machine.")
	} else {
		fmt.Fprintln(d.out, "Ctrl-C stops the example webhook, certapi, kube-apiserver and etcd.")
	}
	fmt.Fprintln(d.out, readyMarker)
	return nil
}

// kustomization is what certapi is installed from with --node.
func (d *demo) kustomization() string {
	if d.ha {
		return "artifacts/deploy/base"
	}
	return "artifacts/deploy/overlays/single-replica"
}

// certapiPods says how certapi runs on the node.
func (d *demo) certapiPods() string {
	if d.ha {
		return "three pods (one etcd cluster)"
	}
	return "a pod"
}

// 1. The control plane, and certapi's registration as kube-apiserver sees it.
func (d *demo) controlPlane(ctx context.Context) error {
	var err error
	d.progress, err = os.Create(filepath.Join(d.dir, "logs", "local-up.log"))
	if err != nil {
		return err
	}
	t0 := time.Now()
	timeout := framework.StartTimeout
	opts := framework.Options{Dir: d.dir, Stdout: d.progress, CertapiArgs: []string{"--rotation-grace=" + rotationGrace.String()}}
	if d.node {
		fmt.Fprintf(d.out, "Starting etcd, kube-apiserver and the node (each step is logged to %s) ...\n", d.show(d.progress.Name()))
		var images []string
		for _, name := range []string{"certapi.tar", webhookImage} {
			archive, err := framework.ImageArchive(name)
			if err != nil {
				return err
			}
			images = append(images, archive)
		}
		timeout += framework.NodeLockTimeout
		opts.Node, opts.SkipCertapi, opts.NodeImages, opts.WorkerNodes = true, true, images, d.workers
	} else {
		fmt.Fprintf(d.out, "Starting etcd, kube-apiserver and certapi (each step is logged to %s) ...\n", d.show(d.progress.Name()))
	}
	startCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cp, err := framework.Start(startCtx, opts)
	if err != nil {
		if cp != nil && ctx.Err() == nil {
			framework.PrintLogTails(os.Stderr, cp.Logs())
			cp.Stop()
		}
		return err
	}
	d.cp = cp
	if d.node {
		fmt.Fprintf(d.out, "   node %s up; installing certapi as users do: kubectl apply -k %s\n", cp.ClusterNode.Name, d.kustomization())
		fmt.Fprintln(d.out, "   (with the Secret certapi-encryption-config and the image certapi.tar of `make images`) ...")
		install := cp.InstallCertapiSingleReplica
		if d.ha {
			install = cp.InstallCertapiHA
		}
		if err := install(startCtx, "--rotation-grace="+rotationGrace.String()); err != nil {
			return err
		}
	}
	up := since(t0)
	if d.kube, err = kubernetes.NewForConfig(cp.AdminConfig); err != nil {
		return err
	}
	if d.certapi, err = versioned.NewForConfig(cp.AdminConfig); err != nil {
		return err
	}
	agg, err := aggregatorclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		return err
	}

	// The framework registered the APIService with no caBundle; certapi injected its own CA bundle.
	var serial string
	err = poll(ctx, "certapi's APIService to hold certapi's CA bundle, injected by certapi", nil, func(ctx context.Context) (bool, string) {
		svc, err := agg.ApiregistrationV1().APIServices().Get(ctx, framework.CertapiAPIService, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ca, err := d.certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		available := apiregistrationv1helper.IsAPIServiceConditionTrue(svc, apiregistrationv1.Available)
		byCertapi := slices.ContainsFunc(svc.ManagedFields, func(m metav1.ManagedFieldsEntry) bool {
			return m.Manager == certapiv1alpha1.FieldManager && m.FieldsV1 != nil && strings.Contains(string(m.FieldsV1.Raw), `"f:caBundle"`)
		})
		status := fmt.Sprintf("Available=%v, caBundle of %d bytes (certapi's: %d), set by certapi: %v, insecureSkipTLSVerify=%v",
			available, len(svc.Spec.CABundle), len(ca.Status.CABundle), byCertapi, svc.Spec.InsecureSkipTLSVerify)
		if ca.Status.Active == nil || !available || !byCertapi || svc.Spec.InsecureSkipTLSVerify ||
			ca.Status.CABundle == "" || string(svc.Spec.CABundle) != ca.Status.CABundle {
			return false, status
		}
		serial = ca.Status.Active.SerialNumber
		d.caBundle = []byte(ca.Status.CABundle)
		return true, status
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "1. certapi is registered: APIService %s Available, caBundle injected by certapi itself (CA serial %s)\n",
		framework.CertapiAPIService, serial)
	if d.node {
		fmt.Fprintf(d.out, "   up in %s: etcd %s, kube-apiserver %s, %s, certapi as %s in %s\n", up, d.cp.EtcdEndpoint,
			d.cp.APIServerURL, d.nodesLine(), d.certapiPods(), framework.CertapiNamespace)
	} else {
		fmt.Fprintf(d.out, "   up in %s: etcd %s, kube-apiserver %s, certapi %s\n", up, d.cp.EtcdEndpoint, d.cp.APIServerURL, d.cp.CertapiURL)
	}
	fmt.Fprintf(d.out, "   kubeconfig %s; certapi runs with --rotation-grace=%s (default 1h), so a forced CA rotation completes in seconds\n",
		d.show(d.cp.Kubeconfig), rotationGrace)
	return nil
}

// 2. The webhook's namespace and RBAC from the example's manifests, and its ServingCertRequest from the plugin.
func (d *demo) request(ctx context.Context) error {
	fmt.Fprintln(d.out, "2. The webhook's namespace, ServiceAccount and RBAC from the example's manifests, and its ServingCertRequest,")
	fmt.Fprintf(d.out, "   made with the kubectl plugin (%s):\n", d.show(filepath.Join(d.bin, pluginBinary)))
	manifests := d.show(filepath.Join(d.root, exampleDir, "manifests"))
	if _, err := d.kubectlOK(ctx, "apply", "-f", manifests+"/namespace.yaml", "-f", manifests+"/rbac.yaml"); err != nil {
		return err
	}
	_, err := d.kubectlOK(ctx, "create", "servingcertrequest", webhookName, "-n", webhookNamespace, "--service="+webhookName)
	return err
}

// 3. The example webhook, started with no certificate, as its ServiceAccount.
func (d *demo) startWebhook(ctx context.Context) error {
	if d.node {
		return d.startWebhookPods(ctx)
	}
	// The webhook runs with the rights of its ServiceAccount (manifests/rbac.yaml) and nothing more, as
	// in a cluster: a token from the TokenRequest API in a kubeconfig of its own.
	expiry := int64((365 * 24 * time.Hour).Seconds())
	tr, err := d.kube.CoreV1().ServiceAccounts(webhookNamespace).CreateToken(ctx, webhookName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("getting a token for ServiceAccount %s/%s: %w", webhookNamespace, webhookName, err)
	}
	kubeconfig := filepath.Join(d.dir, "example-webhook.kubeconfig")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["certapi-local"] = &clientcmdapi.Cluster{Server: d.cp.APIServerURL, CertificateAuthorityData: d.cp.AdminConfig.CAData}
	cfg.AuthInfos[webhookName] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts[webhookName] = &clientcmdapi.Context{Cluster: "certapi-local", AuthInfo: webhookName}
	cfg.CurrentContext = webhookName
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		return err
	}

	ports, err := framework.FreePorts(2)
	if err != nil {
		return err
	}
	port, health := ports[0], ports[1]
	logPath := filepath.Join(d.dir, "logs", "example-webhook.log")
	t0 := time.Now()
	d.webhook, err = framework.StartProcess(webhookBinary, logPath, filepath.Join(d.bin, webhookBinary), []string{
		"--kubeconfig=" + kubeconfig,
		"--namespace=" + webhookNamespace,
		"--request=" + webhookName,
		"--bind-address=127.0.0.1",
		"--port=" + strconv.Itoa(port),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(health),
	}, nil)
	if err != nil {
		return err
	}
	go func() {
		<-d.webhook.Done()
		if !d.stopping.Load() {
			_, err := d.webhook.Exited()
			fmt.Fprintf(d.out, "local-up: the example webhook exited (%v); see %s\n", err, d.show(logPath))
		}
	}()
	fmt.Fprintf(d.out, "3. The example webhook (%s: controller-runtime and pkg/servingcert) started with no certificate,\n", exampleDir)
	fmt.Fprintf(d.out, "   as ServiceAccount %s/%s with only the RBAC above; pid %d, log %s\n", webhookNamespace, webhookName, d.webhook.Pid(), d.show(logPath))

	// Ready once pkg/servingcert holds a certificate and the webhook server is up; an exit of the
	// webhook ends the wait with the end of its log.
	readyz := fmt.Sprintf("http://127.0.0.1:%d/readyz", health)
	client := &http.Client{Timeout: 2 * time.Second}
	err = poll(ctx, "the example webhook to be Ready ("+readyz+")", []*framework.Process{d.webhook}, func(ctx context.Context) (bool, string) {
		body, code, err := framework.HTTPGet(ctx, client, readyz)
		if err != nil {
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("HTTP %d: %s", code, body)
	})
	if err != nil {
		return err
	}
	ready := since(t0)

	// What kube-apiserver will see: the certificate, verified for the Service's name against certapi's bundle.
	leaf, serverName, err := d.servedLeaf(net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	fmt.Fprintf(d.out, "   Ready %s after start: its key was made in memory, its certificate issued by certapi (serial %s),\n", ready, leaf.SerialNumber.Text(16))
	fmt.Fprintf(d.out, "   valid for %s until %s; no Secret, no file. Serving https://127.0.0.1:%d (readiness %s)\n",
		serverName, leaf.NotAfter.UTC().Format(time.RFC3339), port, readyz)
	d.webhookPort = port
	return nil
}

// servedLeaf is the certificate the example webhook serves at addr, verified as kube-apiserver verifies
// it: for the Service's name (returned too), against certapi's bundle.
func (d *demo) servedLeaf(addr string) (*x509.Certificate, string, error) {
	serverName := webhookName + "." + webhookNamespace + ".svc"
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(d.caBundle) {
		return nil, serverName, errors.New("certapi's CA bundle holds no certificate")
	}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	conn, err := tls.DialWithDialer(dialer, "tcp", addr, &tls.Config{RootCAs: roots, ServerName: serverName})
	if err != nil {
		return nil, serverName, fmt.Errorf("%s: the example webhook's certificate does not verify for %s against certapi's CA bundle: %w", addr, serverName, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0], serverName, nil
}

// startWebhookPods is step 3 on a node: the example's own manifests applied as a user applies them, with
// the image of `make images` (as `kustomize edit set image` would) and without the ServingCertRequest (made
// with the plugin in step 2) and the ValidatingWebhookConfiguration (step 4). Its pods start with no
// certificate and become Ready once pkg/servingcert holds one; its Service sends kube-apiserver to them.
func (d *demo) startWebhookPods(ctx context.Context) error {
	names := d.cp.ClusterNode.Images[webhookImage]
	if len(names) == 0 {
		return fmt.Errorf("the node has no image from %s (make images)", webhookImage)
	}
	overlay, err := framework.OverlayKustomization(filepath.Join(exampleDir, "manifests"), map[string]string{webhookImageName: names[0]}, `- patch: |-
    $patch: delete
    apiVersion: certapi.dev/v1alpha1
    kind: ServingCertRequest
    metadata:
      name: example-webhook
      namespace: example-webhook
- patch: |-
    $patch: delete
    apiVersion: admissionregistration.k8s.io/v1
    kind: ValidatingWebhookConfiguration
    metadata:
      name: example-webhook
`)
	if err != nil {
		return err
	}
	defer os.RemoveAll(overlay)
	fmt.Fprintf(d.out, "3. The example webhook (%s: controller-runtime and pkg/servingcert) as users run it: the pods and Service\n", exampleDir)
	fmt.Fprintf(d.out, "   of its manifests, with the image %s of `make images` (an overlay of %s/manifests that sets the image,\n", names[0], exampleDir)
	fmt.Fprintln(d.out, "   leaving out the request of step 2 and the webhook configuration of step 4); the pods start with no certificate:")
	t0 := time.Now()
	if _, err := d.kubectlOK(ctx, "apply", "-k", d.show(overlay)); err != nil {
		return err
	}
	var pods []corev1.Pod
	err = framework.PollUntil(ctx, 500*time.Millisecond, podsTimeout, fmt.Sprintf("the example webhook's %d pods to be Ready", webhookReplicas), nil, func(ctx context.Context) (bool, string) {
		list, err := d.kube.CoreV1().Pods(webhookNamespace).List(ctx, metav1.ListOptions{LabelSelector: webhookSelector})
		if err != nil {
			return false, err.Error()
		}
		pods = pods[:0]
		var states []string
		for _, p := range list.Items {
			ready := p.DeletionTimestamp == nil && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			})
			if ready {
				pods = append(pods, p)
			}
			states = append(states, fmt.Sprintf("%s %s ready=%v", p.Name, p.Status.Phase, ready))
		}
		return len(pods) == webhookReplicas, strings.Join(states, ", ")
	})
	if err != nil {
		return err
	}
	ready := since(t0)

	// What kube-apiserver will see: each pod's certificate, verified for the Service's name against
	// certapi's bundle, at the pod's address (kube-apiserver dials the endpoints, as here).
	var leaf *x509.Certificate
	var serverName string
	for _, p := range pods {
		addr := net.JoinHostPort(p.Status.PodIP, "9443")
		if leaf, serverName, err = d.servedLeaf(addr); err != nil {
			return fmt.Errorf("pod %s: %w", p.Name, err)
		}
		fmt.Fprintf(d.out, "   pod %s on node %s, %s: certificate serial %s from certapi, key made in the pod's memory\n", p.Name, p.Spec.NodeName, addr, leaf.SerialNumber.Text(16))
	}
	fmt.Fprintf(d.out, "   both Ready %s after the apply, valid for %s until %s; no Secret, no file, no restart\n",
		ready, serverName, leaf.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// 4. The Service and the annotated ValidatingWebhookConfiguration; certapi injects the caBundle.
func (d *demo) register(ctx context.Context) error {
	port := int32(d.webhookPort) //nolint:gosec // a TCP port
	// The ValidatingWebhookConfiguration is the example's own manifest: annotated for injection, and with
	// no caBundle.
	file := filepath.Join(d.root, exampleDir, "manifests", "validatingwebhookconfiguration.yaml")
	vwc, err := readVWC(file)
	if err != nil {
		return err
	}
	if vwc.Annotations[certapiv1alpha1.AnnotationInjectCABundle] != "true" {
		return fmt.Errorf("%s is not annotated %s: \"true\"", file, certapiv1alpha1.AnnotationInjectCABundle)
	}
	for i := range vwc.Webhooks {
		if len(vwc.Webhooks[i].ClientConfig.CABundle) > 0 {
			return fmt.Errorf("%s has a caBundle; certapi injects it", file)
		}
	}
	vwcs := d.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if d.node {
		// The pods and their Service (step 3) are what kube-apiserver calls: the manifest as it is.
		fmt.Fprintln(d.out, "4. kube-apiserver is told where the webhook is, and certapi tells it what to trust:")
		if _, err := d.kubectlOK(ctx, "apply", "-f", d.show(file)); err != nil {
			return err
		}
	} else {
		// No Pods run here, so an ExternalName Service to localhost stands in for manifests/service.yaml
		// (kube-apiserver still checks the certificate for example-webhook.example-webhook.svc), and the
		// configuration's Service port is changed to the local one.
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: webhookName, Namespace: webhookNamespace},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
				Ports: []corev1.ServicePort{{Name: "https", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port)}}},
		}
		if _, err := d.kube.CoreV1().Services(webhookNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating Service %s/%s: %w", webhookNamespace, webhookName, err)
		}
		for i := range vwc.Webhooks {
			if s := vwc.Webhooks[i].ClientConfig.Service; s != nil {
				s.Port = &port
			}
		}
		if _, err := vwcs.Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ValidatingWebhookConfiguration %s: %w", vwc.Name, err)
		}
	}
	t0 := time.Now()
	err = poll(ctx, "certapi to inject the caBundle of ValidatingWebhookConfiguration "+vwc.Name, nil, func(ctx context.Context) (bool, string) {
		got, err := vwcs.Get(ctx, vwc.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if slices.ContainsFunc(got.Webhooks, func(w admissionregistrationv1.ValidatingWebhook) bool {
			return !bytes.Equal(w.ClientConfig.CABundle, d.caBundle)
		}) {
			return false, "a webhook's caBundle is not certapi's CA bundle yet"
		}
		return true, ""
	})
	if err != nil {
		return err
	}
	if d.node {
		fmt.Fprintf(d.out, "   ValidatingWebhookConfiguration %s names Service %s/%s (step 3, the pods' endpoints), with no caBundle;\n", vwc.Name, webhookNamespace, webhookName)
		fmt.Fprintf(d.out, "   certapi injected its CA bundle %s later\n", since(t0))
		return nil
	}
	fmt.Fprintf(d.out, "4. kube-apiserver is told where the webhook is, and certapi tells it what to trust:\n")
	fmt.Fprintf(d.out, "   Service %s/%s: ExternalName localhost, port %d (it stands in for manifests/service.yaml: no Pods here)\n", webhookNamespace, webhookName, port)
	fmt.Fprintf(d.out, "   ValidatingWebhookConfiguration %s from %s (port set to %d),\n", vwc.Name, d.show(file), port)
	fmt.Fprintf(d.out, "   created with no caBundle; certapi injected its CA bundle %s later\n", since(t0))
	return nil
}

// 5. kube-apiserver calls the webhook for ConfigMaps in a namespace that opts in, and enforces its answer.
func (d *demo) enforce(ctx context.Context) error {
	fmt.Fprintf(d.out, "5. kube-apiserver calls the webhook and enforces its decision, in a namespace labelled %s=enabled:\n", validateLabel)
	if _, err := d.kubectlOK(ctx, "create", "namespace", demoNamespace); err != nil {
		return err
	}
	if _, err := d.kubectlOK(ctx, "label", "namespace", demoNamespace, validateLabel+"=enabled"); err != nil {
		return err
	}
	// The namespace also opts in to Secret delivery (docs/usage.md), for the kubectl create servingcertrequest
	// --secret of "What to try next": the RoleBinding that lets certapi's ServiceAccount write Secrets
	// here, then the label.
	if _, err := d.kubectlOK(ctx, "create", "rolebinding", "certapi-secret-delivery", "-n", demoNamespace,
		"--clusterrole="+certapiv1alpha1.ClusterRoleSecretDelivery, "--serviceaccount="+framework.CertapiNamespace+":certapi"); err != nil {
		return err
	}
	if _, err := d.kubectlOK(ctx, "label", "namespace", demoNamespace, certapiv1alpha1.LabelSecretDelivery+"="+certapiv1alpha1.SecretDeliveryEnabled); err != nil {
		return err
	}
	// kube-apiserver loads webhook configurations (and their caBundle) through an informer, and namespace
	// labels through another: wait, with server-side dry runs, until it calls the webhook for this
	// namespace and gets its answer. A dry run stores nothing; the webhook has no side effects.
	forbiddenFile := filepath.Join(d.root, exampleDir, "forbidden-configmap.yaml")
	forbidden := &corev1.ConfigMap{}
	if err := decodeYAMLFile(forbiddenFile, forbidden); err != nil {
		return err
	}
	err := poll(ctx, "kube-apiserver to call the example webhook for namespace "+demoNamespace, nil, func(ctx context.Context) (bool, string) {
		_, err := d.kube.CoreV1().ConfigMaps(demoNamespace).Create(ctx, forbidden, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "denied the request"), fmt.Sprintf("answer to a dry run of %s: %v", forbiddenFile, err)
	})
	if err != nil {
		return err
	}
	if _, err := d.kubectlOK(ctx, "create", "configmap", "allowed", "-n", demoNamespace, "--from-literal=greeting=hello"); err != nil {
		return err
	}
	res, err := d.runKubectl(ctx, "create", "-n", demoNamespace, "-f", d.show(forbiddenFile))
	if err != nil {
		return err
	}
	if res.code == 0 || !strings.Contains(res.stderr, "denied the request") {
		return fmt.Errorf("kubectl create -f %s: exit code %d, want a denial from the webhook\n%s%s", forbiddenFile, res.code, res.stdout, res.stderr)
	}
	return nil
}

// 6. A pod certificate, the way kubelet gets one: a ServingCertRequest that lets ServiceAccount web have
// it, a Pod with a podCertificate volume bound to a Node, and, as that node's kubelet
// (system:node:<node>, checked by the Node authorizer and NodeRestriction), the PodCertificateRequest for a
// key made on the node; certapi answers it, and the certificate verifies against the ClusterTrustBundle
// that pods mount.
func (d *demo) podCertificate(ctx context.Context) error {
	fmt.Fprintf(d.out, "6. A pod certificate from kubelet's path (signer %s): a request for Service web that ServiceAccount web may use,\n", podCertSigner)
	fmt.Fprintf(d.out, "   a pod with a podCertificate volume on node %s, and its PodCertificateRequest made as system:node:%s:\n", podCertNode, podCertNode)
	if _, err := d.kubectlOK(ctx, "create", "servingcertrequest", "web", "-n", demoNamespace, "--service=web", "--service-account=web"); err != nil {
		return err
	}
	node, err := d.cp.NewNode(ctx, podCertNode)
	if err != nil {
		return err
	}
	source := corev1.PodCertificateProjection{
		SignerName:      podCertSigner,
		KeyType:         "ECDSAP256",
		UserAnnotations: map[string]string{certapiv1alpha1.UserAnnotationServingCertRequest: "web"},
	}
	pod, err := node.CreatePod(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: demoNamespace, Name: "web-0"},
		Spec: corev1.PodSpec{
			ServiceAccountName: "web",
			Containers:         []corev1.Container{{Name: "server", Image: "registry.k8s.io/pause:3.10"}},
			Volumes:            []corev1.Volume{framework.PodCertificateVolume("tls", source, podCertSigner)},
		},
	})
	if err != nil {
		return err
	}
	key, err := framework.PodCertificateKey(source.KeyType)
	if err != nil {
		return err
	}
	stepCtx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	t0 := time.Now()
	pcr, err := node.CreatePodCertificateRequest(stepCtx, pod, pod.Spec.Volumes[0].Projected.Sources[0].PodCertificate, key)
	if err != nil {
		return err
	}
	if pcr, err = node.WaitPodCertificateRequest(stepCtx, demoNamespace, pcr.Name); err != nil {
		return err
	}
	took := since(t0)
	if state := framework.PodCertificateRequestAnswered(pcr); state != "Issued" {
		return fmt.Errorf("PodCertificateRequest %s/%s: %s: %+v", demoNamespace, pcr.Name, state, pcr.Status.Conditions)
	}
	ctb, err := d.kube.CertificatesV1().ClusterTrustBundles().Get(ctx, podCertBundle, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting ClusterTrustBundle %s: %w", podCertBundle, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(ctb.Spec.TrustBundle)) {
		return fmt.Errorf("ClusterTrustBundle %s holds no certificate", podCertBundle)
	}
	leafPEM, _ := pem.Decode([]byte(pcr.Status.CertificateChain))
	if leafPEM == nil {
		return fmt.Errorf("PodCertificateRequest %s/%s: no certificate in status.certificateChain", demoNamespace, pcr.Name)
	}
	leaf, err := x509.ParseCertificate(leafPEM.Bytes)
	if err != nil {
		return err
	}
	name := "web." + demoNamespace + ".svc"
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Errorf("the pod certificate does not verify for %s against ClusterTrustBundle %s: %w", name, podCertBundle, err)
	}
	fmt.Fprintf(d.out, "   PodCertificateRequest %s Issued %s after it was created: a certificate for %s for the node's key,\n", pcr.Name, took, strings.Join(leaf.DNSNames, ", "))
	fmt.Fprintf(d.out, "   valid until %s, kubelet refreshes it at %s; it verifies against ClusterTrustBundle %s\n",
		pcr.Status.NotAfter.UTC().Format(time.RFC3339), pcr.Status.BeginRefreshAt.UTC().Format(time.RFC3339), podCertBundle)
	return nil
}

// 7. certapi as an admin sees it, with the kubectl plugin kubectl-certapi.
func (d *demo) status(ctx context.Context) error {
	fmt.Fprintf(d.out, "7. certapi as an admin sees it, with the kubectl plugin %s: the leader, the CA and its rotation,\n", d.show(filepath.Join(d.bin, adminPlugin)))
	fmt.Fprintln(d.out, "   the injection targets (certapi's APIService, the webhook configuration and the ClusterTrustBundle) and the requests nearest expiry:")
	_, err := d.kubectlOK(ctx, "certapi", "status")
	return err
}

func (d *demo) whatNext() {
	kubeconfig := d.shell(d.cp.Kubeconfig)
	logs := d.show(filepath.Join(d.dir, "logs"))
	forbidden := d.show(filepath.Join(d.root, exampleDir, "forbidden-configmap.yaml"))
	webhookLogs := [2]string{"tail -f " + logs + "/example-webhook.log", `within a minute: "The Active CA changed; re-issuing", no restart`}
	stillDenied := "still denied: the same process kept serving"
	if d.node {
		webhookLogs[0] = "kubectl logs -f -n " + webhookNamespace + " deploy/" + webhookName
		stillDenied = "still denied: the same pods kept serving"
	}
	lines := [][2]string{
		{fmt.Sprintf("export KUBECONFIG=%s PATH=%s:$PATH", kubeconfig, d.shell(d.bin)), ""},
		{"kubectl get scr -A", "the request, Ready, and its latest issuance"},
		{"kubectl get certificateauthority default -o yaml", "the bundle, the Active CA, the injection summary"},
		{"kubectl certapi rotate --wait", "a forced rotation (spec.forceRotation), step by step until the new CA signs"},
		webhookLogs,
		{"kubectl create -n " + demoNamespace + " -f " + forbidden, stillDenied},
		{"kubectl create servingcertrequest my-app -n " + demoNamespace + " --service=my-app --secret=my-app-tls --wait", ""},
		{"kubectl certapi inspect secret my-app-tls -n " + demoNamespace, "tls.crt, tls.key, ca.crt, kept renewed by certapi"},
		{"kubectl get podcertificaterequests -n " + demoNamespace + " -o wide", "the pod certificate of step 6, Issued"},
		{"kubectl get clustertrustbundle " + podCertBundle + " -o yaml", "the bundle pods mount, kept by certapi"},
		{"kubectl certapi check", "exit status 0 while certapi serves"},
	}
	// Where certapi's pods run: on the one node, or on the workers with CoreDNS on the first node.
	var certapiOn, dnsOn string
	if d.node {
		certapiOn, dnsOn = "and CoreDNS on node "+d.cp.ClusterNode.Name, ""
		if len(d.cp.Workers) > 0 {
			certapiOn, dnsOn = "on the workers", ", CoreDNS on "+d.cp.ClusterNode.Name
			lines = append(lines, [2]string{"kubectl get nodes -L topology.kubernetes.io/zone", fmt.Sprintf("%s and %d workers, each in a zone of its own", d.cp.ClusterNode.Name, len(d.cp.Workers))})
		}
	}
	switch {
	case d.ha:
		lines = append(lines,
			[2]string{"kubectl get pods -A -o wide", "certapi-0, -1, -2 " + certapiOn + dnsOn},
			[2]string{"kubectl get certificateauthority default -o jsonpath='{.status.etcd}'", "the three etcd members, the etcd leader"},
			[2]string{"kubectl logs -n " + framework.CertapiNamespace + " certapi-1", "a replica's log: its member joined, promoted"},
			[2]string{"kubectl delete pod -n " + framework.CertapiNamespace + " certapi-0", "the other two keep serving; certapi-0 rejoins"})
	case d.node:
		lines = append(lines,
			[2]string{"kubectl get pods -A -o wide", "certapi's pod " + certapiOn + dnsOn},
			[2]string{"kubectl logs -n " + framework.CertapiNamespace + " deploy/certapi", "certapi's log, from kubelet"})
	}
	fmt.Fprintln(d.out, "What to try next, in another shell:")
	for _, l := range lines {
		if l[1] == "" {
			fmt.Fprintf(d.out, "  %s\n", l[0])
		} else {
			fmt.Fprintf(d.out, "  %-50s # %s\n", l[0], l[1])
		}
	}
	fmt.Fprintf(d.out, "Story and manifests: %s/README.md\n\n", d.show(filepath.Join(d.root, exampleDir)))
}

// nodesLine says where the nodes are: the first node's address and pod range, and each worker's.
func (d *demo) nodesLine() string {
	parts := []string{fmt.Sprintf("node %s at %s (pods in %s)", d.cp.ClusterNode.Name, d.cp.ClusterNode.IP, d.cp.ClusterNode.PodCIDR)}
	for _, w := range d.cp.Workers {
		parts = append(parts, fmt.Sprintf("worker %s at %s in %s (pods in %s)", w.Name, w.IP, w.Zone, w.PodCIDR))
	}
	return strings.Join(parts, ", ")
}

// stop stops the webhook, then the control plane. It is idempotent.
func (d *demo) stop() {
	d.stopOnce.Do(func() {
		d.stopping.Store(true)
		if d.webhook != nil {
			if err := d.webhook.Stop(webhookStopGrace); err != nil {
				fmt.Fprintf(os.Stderr, "local-up: stopping the example webhook: %v\n", err)
			}
		}
		if d.cp != nil {
			d.cp.Stop()
		}
		if d.progress != nil {
			d.progress.Close()
		}
	})
}

// ---------------------------------------------------------------------------------------------
// kubectl

type kubectlResult struct {
	stdout, stderr string
	code           int
}

// runKubectl runs the real kubectl against the local stack, with the bin directory first on PATH (so
// that kubectl finds the plugin), prints the command and its output indented, and returns them.
func (d *demo) runKubectl(ctx context.Context, args ...string) (kubectlResult, error) {
	fmt.Fprintf(d.out, "   $ kubectl %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, d.kubectl, args...) // in the working directory: paths are shown relative to it
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "PATH=") || strings.HasPrefix(kv, "KUBECONFIG=") || strings.HasPrefix(kv, "KUBERC=")
	})
	cmd.Env = append(env,
		"PATH="+d.bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+d.cp.Kubeconfig,
		"KUBERC=off", // a personal kubectl configuration must not change what the walkthrough does
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := kubectlResult{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		res.code = exit.ExitCode()
	case err != nil:
		return res, fmt.Errorf("running kubectl %s: %w", strings.Join(args, " "), err)
	}
	for _, s := range []string{res.stdout, res.stderr} {
		if s = strings.TrimRight(s, "\n"); s == "" {
			continue
		}
		for _, line := range strings.Split(s, "\n") {
			fmt.Fprintln(d.out, strings.TrimRight("   "+line, " "))
		}
	}
	return res, nil
}

// kubectlOK is runKubectl that fails unless kubectl exits 0.
func (d *demo) kubectlOK(ctx context.Context, args ...string) (kubectlResult, error) {
	res, err := d.runKubectl(ctx, args...)
	if err == nil && res.code != 0 {
		err = fmt.Errorf("kubectl %s: exit code %d", strings.Join(args, " "), res.code)
	}
	return res, err
}

// ---------------------------------------------------------------------------------------------
// helpers

// poll is framework.PollUntil with local-up's interval and step deadline: cond, which says what it
// saw for the error on timeout, until it reports done or every process of procs has exited.
func poll(ctx context.Context, what string, procs []*framework.Process, cond func(context.Context) (bool, string)) error {
	return framework.PollUntil(ctx, pollInterval, stepTimeout, what, procs, cond)
}

// readVWC reads a ValidatingWebhookConfiguration manifest, refusing unknown fields.
func readVWC(path string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := decodeYAMLFile(path, vwc); err != nil {
		return nil, err
	}
	if vwc.Kind != "ValidatingWebhookConfiguration" || vwc.Name == "" {
		return nil, fmt.Errorf("%s: kind %q, name %q; want a named ValidatingWebhookConfiguration", path, vwc.Kind, vwc.Name)
	}
	return vwc, nil
}

// decodeYAMLFile decodes the single YAML document in path into obj, refusing unknown fields.
func decodeYAMLFile(path string, obj any) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	js, err := utilyaml.ToJSON(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(obj); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// show returns path relative to the working directory when it lies under it, else path.
func (d *demo) show(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	rel, err := filepath.Rel(wd, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return path
	}
	return rel
}

// shell returns path for a shell command that may run in another directory: "$PWD/<relative>" when path
// lies under the working directory, else path.
func (d *demo) shell(path string) string {
	if rel := d.show(path); !filepath.IsAbs(rel) {
		return "$PWD/" + rel
	}
	return path
}

func since(t time.Time) time.Duration {
	d := time.Since(t)
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
