// Package framework starts a real control plane — etcd, kube-apiserver and certapi as local
// processes on 127.0.0.1 — for end-to-end tests and for a developer's local stack.
//
// Start needs the binaries built by `make tools` in <repo>/_output/bin (or named by $ETCD_BIN and
// $KUBE_APISERVER_BIN); certapi is built from ./cmd/certapi once per process unless $CERTAPI_BIN
// names a prebuilt binary. Tests use StartT; hack/local-up and hack/load use Start and Stop, and
// the helpers for what they run and wait for next to it: StartProcess, FreePorts, PollUntil,
// HTTPGet and PrintLogTails.
//
// By default there is no controller manager, scheduler or kubelet: namespaces that are deleted stay
// Terminating, no ServiceAccount or token controller runs, Pods never start. Options.Node adds a real
// node (ClusterNode): containerd and runc from the machine's packages, a CNI bridge, kubelet,
// kube-proxy, kube-controller-manager, kube-scheduler and CoreDNS, so that pods run from the images of
// `make images` as in a cluster; ControlPlane.Stop removes all of it from the machine. kube-apiserver
// authorizes with Node and RBAC and admits with NodeRestriction, as a real cluster does, so a test
// can play a kubelet's part with UserConfig("system:node:<node>", "system:nodes") against a Node,
// Pods and ServiceAccounts it creates itself (NewNode), or run kubelet's own podcertificate manager for
// a node (Node.StartKubelet, with podcertnode from `make tools`). certapi is reached by kube-apiserver
// through a Service of type ExternalName pointing at localhost: at certapi's port with one replica, or
// with Options.CertapiReplicas > 1 at an in-process round-robin TCP proxy in front of the replicas
// (ProxyPort), which skips replicas that are down as a Service would.
//
// For fault tests, Options.EtcdMembers runs etcd as a cluster of several members, and the
// ControlPlane can stop, kill and restart etcd members (StopEtcd, KillEtcdMember, StartEtcdMember,
// ...), kube-apiserver (StopAPIServer, KillAPIServer, StartAPIServer) and certapi replicas, and
// pause a replica with SIGSTOP (PauseReplica, ResumeReplica).
package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	apiregistrationv1helper "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1/helper"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"
)

// Names of the objects the framework creates to register certapi with kube-apiserver.
const (
	CertapiNamespace   = "certapi-system"
	CertapiServiceName = "certapi"
	CertapiGroup       = "certapi.dev"
	CertapiVersion     = "v1alpha1"
	CertapiAPIService  = CertapiVersion + "." + CertapiGroup
	// CertapiEtcdPrefix is the key prefix certapi stores its objects under in the shared etcd.
	CertapiEtcdPrefix = "/registry/certapi.dev"
)

// Process names, as used in Logs and in <Dir>/logs/<name>.log. With several certapi replicas,
// replica i is named ProcessCertapi+"-<i>" (see ControlPlane.ReplicaName), and the round-robin
// proxy in front of them logs as ProcessCertapiProxy.
const (
	ProcessEtcd          = "etcd"
	ProcessKubeAPIServer = "kube-apiserver"
	ProcessCertapi       = "certapi"
	ProcessCertapiProxy  = "certapi-proxy"
)

// StartTimeout is a deadline for all of Start that suits a cold start on a busy two-core machine,
// building certapi included; StartT uses it, and so do hack/local-up and hack/load.
const StartTimeout = 5 * time.Minute

// Deadlines for each step of Start. They are generous because a cold kube-apiserver on a busy
// two-core machine can take tens of seconds; a shorter ctx deadline wins.
const (
	etcdReadyTimeout       = 60 * time.Second
	apiServerReadyTimeout  = 3 * time.Minute
	certapiReadyTimeout    = 2 * time.Minute
	apiServiceReadyTimeout = 2 * time.Minute
	pollInterval           = 100 * time.Millisecond
	healthRequestTimeout   = 5 * time.Second

	etcdStopGrace      = 10 * time.Second
	apiServerStopGrace = 20 * time.Second
	certapiStopGrace   = 20 * time.Second
)

// Options configures Start.
type Options struct {
	// Dir is the working directory for PKI, data and logs; created if missing. Required for Start.
	// A Dir that already holds a PKI and data (a restarted local stack) is reused.
	Dir string
	// SkipCertapi starts only etcd and kube-apiserver.
	SkipCertapi bool
	// CertapiArgs are extra flags for certapi, appended after the framework's own.
	CertapiArgs []string
	// CertapiEmbeddedEtcd runs certapi without --etcd-servers, so that it uses its embedded etcd
	// under --data-dir=<Dir>/certapi-data. Single replica only.
	CertapiEmbeddedEtcd bool
	// CertapiReplicas is how many certapi processes to run; 0 or 1 means one, as always. With
	// N > 1, N replicas are started concurrently (they race on the empty etcd) on distinct ports,
	// all with the same --etcd-servers (the external etcd) and serving certificate, named
	// "certapi-0" .. "certapi-<N-1>" in Logs; kube-apiserver reaches them through a round-robin
	// TCP proxy (ProxyPort) that skips replicas that are down. It cannot be combined with
	// CertapiEmbeddedEtcd.
	CertapiReplicas int
	// CertapiReplicaArgs, when set, returns extra flags for replica i (0-based; also called with 0
	// for a single replica), appended after CertapiArgs. LeaderIdentityArgs gives each replica
	// its own --leader-identity, for a certapi that has that flag.
	CertapiReplicaArgs func(i int) []string
	// EncryptionConfig, when not empty, is the YAML of an apiserver.config.k8s.io/v1
	// EncryptionConfiguration: it is written to <Dir>/encryption-config.yaml (mode 0600) and
	// given to every replica as --encryption-provider-config. See AESCBCEncryptionConfig.
	EncryptionConfig string
	// EtcdMembers is the number of etcd members: 0 or 1 for a single member, as always; 3 (or
	// any number up to 5) for a cluster of that many on loopback, named "etcd-0".. in Logs, which
	// kube-apiserver and certapi reach through every member's client URL. StopEtcdMember,
	// KillEtcdMember and StartEtcdMember take members down and back for fault tests.
	EtcdMembers int
	// Node runs a real node with the control plane (see ClusterNode): containerd and runc from the
	// machine's packages, a CNI bridge, kubelet, kube-proxy, kube-controller-manager, kube-scheduler
	// (v1.37.2, built by `make tools`) and cluster DNS, after kube-apiserver is ready and before certapi.
	// It needs root and the image archives of `make images`; one node runs on a machine at a time (Start
	// waits up to NodeLockTimeout for another test's node to end).
	Node bool
	// NodeImages are image archives imported into the node's containerd besides the pause and CoreDNS
	// images (see ImageArchive), for pods with imagePullPolicy Never or IfNotPresent.
	NodeImages []string
	// Stdout, when set, receives one progress line per step.
	Stdout io.Writer
}

// ControlPlane is a running etcd, kube-apiserver and (unless skipped) certapi.
type ControlPlane struct {
	// Dir is the working directory (absolute).
	Dir string
	// EtcdEndpoint is the client URL of the external etcd (http://127.0.0.1:PORT), used by
	// kube-apiserver and by certapi (under CertapiEtcdPrefix) unless CertapiEmbeddedEtcd is set.
	// With several members it is member 0's; EtcdEndpoints lists them all.
	EtcdEndpoint string
	// EtcdEndpoints is the client URL of every etcd member, member 0 first.
	EtcdEndpoints []string
	// APIServerURL is kube-apiserver's URL (https://127.0.0.1:PORT).
	APIServerURL string
	// AdminConfig is a client config with a system:masters client certificate and no client-side
	// rate limit. Copy it (rest.CopyConfig) before changing it.
	AdminConfig *rest.Config
	// Kubeconfig is the path of an admin kubeconfig file, for kubectl and for certapi itself.
	Kubeconfig string
	// CertapiPort is certapi's secure port on 127.0.0.1: with one replica also the APIService's
	// service port; with several, replica 0's port (see CertapiReplicaURL and ProxyPort).
	CertapiPort int
	// CertapiURL is https://127.0.0.1:CertapiPort.
	CertapiURL string
	// ProxyPort is the port on 127.0.0.1 of the round-robin proxy in front of the replicas, which
	// the ExternalName Service and the APIService point at; 0 with a single replica (no proxy).
	ProxyPort int
	// EncryptionConfigFile is the path Options.EncryptionConfig was written to; empty without one.
	EncryptionConfigFile string
	// CertapiCABundle is the PEM of the framework CA that signed certapi's serving certificate: the
	// APIService caBundle the framework registers.
	CertapiCABundle []byte
	// PKI holds the paths of every generated key and certificate.
	PKI *PKI
	// ClusterNode is the real node (Options.Node); nil without one.
	ClusterNode *ClusterNode

	opts         Options
	certapiBin   string
	etcdBin      string
	apiserverBin string
	ports        *portSet
	clientCA     *keyPair
	out          io.Writer
	// replicas is fixed by Start: one slot per certapi replica (none with SkipCertapi).
	replicas []*replica
	// etcdMembers is fixed by Start: one slot per etcd member.
	etcdMembers []*etcdMember

	mu        sync.Mutex
	apiserver *Process
	proxy     *rrProxy
	proxyLog  *os.File
	logs      map[string]string
	stopped   bool
}

// Start starts etcd, kube-apiserver and, unless opts.SkipCertapi, certapi (opts.CertapiReplicas
// replicas, concurrently, behind the round-robin proxy when more than one) registered as the
// APIService v1alpha1.certapi.dev, and waits until each is ready (Available, for the APIService).
// On error everything already started is stopped, and the (stopped) ControlPlane is still
// returned when Dir could be prepared, so that the caller can read its Logs (see PrintLogTails).
func Start(ctx context.Context, opts Options) (_ *ControlPlane, retErr error) {
	if opts.Dir == "" {
		return nil, errors.New("framework.Options.Dir is required")
	}
	if opts.CertapiReplicas < 0 {
		return nil, fmt.Errorf("framework.Options.CertapiReplicas is %d; want 0 or more", opts.CertapiReplicas)
	}
	if opts.CertapiReplicas > 1 && opts.CertapiEmbeddedEtcd {
		return nil, fmt.Errorf("framework.Options: CertapiEmbeddedEtcd runs a single replica; it cannot be combined with CertapiReplicas=%d", opts.CertapiReplicas)
	}
	if opts.EtcdMembers < 0 || opts.EtcdMembers > 5 {
		return nil, fmt.Errorf("framework.Options.EtcdMembers is %d; want 0 to 5", opts.EtcdMembers)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", opts.Dir, err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", d, err)
		}
	}
	out := opts.Stdout
	if out == nil {
		out = io.Discard
	}
	cp := &ControlPlane{Dir: dir, opts: opts, out: out, logs: map[string]string{}}
	cp.Kubeconfig = filepath.Join(dir, "kubeconfig")
	defer func() {
		if retErr != nil {
			cp.Stop()
		}
	}()
	begin := time.Now()

	cp.etcdBin, err = toolBinary("etcd", EnvEtcdBin)
	if err != nil {
		return cp, err
	}
	cp.apiserverBin, err = toolBinary("kube-apiserver", EnvKubeAPIServerBin)
	if err != nil {
		return cp, err
	}

	// Build certapi while etcd and kube-apiserver start.
	type buildResult struct {
		path string
		err  error
	}
	var certapiBuilt chan buildResult
	if !opts.SkipCertapi {
		certapiBuilt = make(chan buildResult, 1)
		buildCtx, cancelBuild := context.WithCancel(ctx)
		go func() {
			p, err := CertapiBinary(buildCtx)
			certapiBuilt <- buildResult{p, err}
		}()
		// Deferred calls run last-in first-out: on an early return the build is cancelled, then
		// waited for, so that it never outlives Start.
		defer func() {
			if certapiBuilt != nil {
				<-certapiBuilt
			}
		}()
		defer cancelBuild()
	}

	cp.PKI, err = ensurePKI(filepath.Join(dir, "pki"))
	if err != nil {
		return cp, err
	}
	cp.clientCA, err = loadKeyPair(cp.PKI.ClientCACert, cp.PKI.ClientCAKey)
	if err != nil {
		return cp, fmt.Errorf("loading client CA: %w", err)
	}
	cp.CertapiCABundle, err = os.ReadFile(cp.PKI.CertapiCACert)
	if err != nil {
		return cp, fmt.Errorf("reading certapi CA: %w", err)
	}

	replicas := max(opts.CertapiReplicas, 1)
	members := max(opts.EtcdMembers, 1)
	ports, err := allocatePorts(filepath.Join(dir, "ports.json"), replicas-1, members-1)
	if err != nil {
		return cp, err
	}
	cp.ports = ports
	cp.etcdMembers = cp.newEtcdMembers(members, ports)
	for _, m := range cp.etcdMembers {
		cp.EtcdEndpoints = append(cp.EtcdEndpoints, m.clientURL)
	}
	cp.EtcdEndpoint = cp.EtcdEndpoints[0]
	cp.APIServerURL = fmt.Sprintf("https://127.0.0.1:%d", ports.APIServer)
	cp.CertapiPort = ports.Certapi
	cp.CertapiURL = fmt.Sprintf("https://127.0.0.1:%d", ports.Certapi)

	if err := cp.buildAdminConfig(); err != nil {
		return cp, err
	}
	if err := cp.writeKubeconfig(cp.Kubeconfig); err != nil {
		return cp, err
	}

	// etcd
	t0 := time.Now()
	if err := cp.StartEtcd(ctx); err != nil {
		return cp, err
	}
	cp.progress("etcd ready at %s (%s)", cp.etcdServers(), since(t0))

	// kube-apiserver
	t0 = time.Now()
	if err := cp.StartAPIServer(ctx); err != nil {
		return cp, err
	}
	cp.progress("kube-apiserver ready at %s (%s)", cp.APIServerURL, since(t0))

	if opts.Node {
		if err := cp.startNode(ctx); err != nil {
			return cp, err
		}
	}

	if opts.SkipCertapi {
		cp.progress("control plane ready in %s; kubeconfig %s", since(begin), cp.Kubeconfig)
		return cp, nil
	}

	t0 = time.Now()
	res := <-certapiBuilt
	certapiBuilt = nil
	if res.err != nil {
		return cp, res.err
	}
	cp.certapiBin = res.path
	cp.progress("certapi binary %s (waited %s)", res.path, since(t0))

	if opts.EncryptionConfig != "" {
		cp.EncryptionConfigFile = filepath.Join(dir, EncryptionConfigFileName)
		if err := writeFile(cp.EncryptionConfigFile, []byte(opts.EncryptionConfig), 0o600); err != nil {
			return cp, err
		}
	}
	rs := cp.newReplicas(replicas, ports)
	cp.mu.Lock()
	cp.replicas = rs
	cp.mu.Unlock()
	// certapi's namespace exists before certapi starts, as in a real install: in embedded cluster mode
	// certapi keeps its etcd peer CA in a Secret there.
	if err := cp.createCertapiNamespace(ctx); err != nil {
		return cp, err
	}
	t0 = time.Now()
	if err := cp.StartCertapi(ctx); err != nil {
		return cp, err
	}
	if replicas == 1 {
		cp.progress("certapi ready at %s (%s)", cp.CertapiURL, since(t0))
	} else {
		urls := make([]string, replicas)
		for i, r := range cp.replicas {
			urls[i] = r.url
		}
		cp.progress("%d certapi replicas ready at %s (%s)", replicas, strings.Join(urls, ", "), since(t0))
		if err := cp.startProxy(); err != nil {
			return cp, err
		}
		cp.progress("round-robin proxy for certapi on 127.0.0.1:%d", cp.ProxyPort)
	}

	t0 = time.Now()
	if err := cp.registerAPIService(ctx); err != nil {
		return cp, err
	}
	if err := cp.WaitAPIServiceAvailable(ctx); err != nil {
		return cp, err
	}
	cp.progress("APIService %s Available (%s)", CertapiAPIService, since(t0))
	cp.progress("control plane ready in %s; kubeconfig %s", since(begin), cp.Kubeconfig)
	return cp, nil
}

func (cp *ControlPlane) progress(format string, args ...any) {
	if tw, ok := cp.out.(testWriter); ok {
		tw.t.Helper()
		tw.t.Logf("framework: "+format, args...)
		return
	}
	fmt.Fprintf(cp.out, "framework: "+format+"\n", args...)
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// Logs returns the log file of every process started so far, by process name (ProcessEtcd,
// ProcessKubeAPIServer, ProcessCertapi).
func (cp *ControlPlane) Logs() map[string]string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return maps.Clone(cp.logs)
}

func (cp *ControlPlane) logPath(name string) string {
	return filepath.Join(cp.Dir, "logs", name+".log")
}

// launch starts a process and stores it in *slot under cp.mu, so that a concurrent Stop either
// sees it or makes launch kill it.
func (cp *ControlPlane) launch(name, bin string, args []string, slot **Process) (*Process, error) {
	p, err := StartProcess(name, cp.logPath(name), bin, args, nil)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.logs[name] = p.logPath
	if cp.stopped {
		// Stop ran concurrently; do not leave this one behind.
		go p.stop(syscall.SIGKILL, 0) //nolint:errcheck
		return nil, fmt.Errorf("starting %s: control plane is stopped", name)
	}
	*slot = p
	return p, nil
}

// ---------------------------------------------------------------------------------------------
// kube-apiserver

// StartAPIServer starts kube-apiserver with the flags and port of Start (stopping it gracefully
// first if it runs) and waits for its /readyz. With StopAPIServer it restarts kube-apiserver for
// fault tests; the aggregator finds certapi's APIService again by itself.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	if err := cp.StopAPIServer(); err != nil {
		return err
	}
	pki := cp.PKI
	args := []string{
		"--etcd-servers=" + cp.etcdServers(),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cp.ports.APIServer),
		"--advertise-address=127.0.0.1",
		// The lease and master-count reconcilers refuse a loopback advertise address; with no
		// reconciler the default/kubernetes Service simply has no endpoints, which nothing here needs.
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + filepath.Join(cp.Dir, "kube-apiserver"),
		"--tls-cert-file=" + pki.APIServerCert,
		"--tls-private-key-file=" + pki.APIServerKey,
		"--client-ca-file=" + pki.ClientCACert,
		// As a real cluster runs it: the Node authorizer and NodeRestriction are what stand between a
		// kubelet (system:node:<name>) and PodCertificateRequests for pods not on its node.
		// certificates.k8s.io/v1 PodCertificateRequests and ClusterTrustBundles are GA and served by
		// default in 1.37: no feature gate or runtime-config is needed.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-key-file=" + pki.ServiceAccountPub,
		"--service-account-signing-key-file=" + pki.ServiceAccountKey,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + ServiceCIDR,
		"--requestheader-client-ca-file=" + pki.FrontProxyCACert,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki.FrontProxyClientCert,
		"--proxy-client-key-file=" + pki.FrontProxyClientKey,
		"--enable-aggregator-routing=false",
		// For kubectl logs, exec and port-forward on the node (Options.Node), whose kubelet trusts the
		// client CA.
		"--kubelet-client-certificate=" + pki.KubeletClientCert,
		"--kubelet-client-key=" + pki.KubeletClientKey,
		// As kubeadm sets it: the node's name (certapi-node) resolves nowhere.
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--v=2",
	}
	p, err := cp.launch(ProcessKubeAPIServer, cp.apiserverBin, args, &cp.apiserver)
	if err != nil {
		return err
	}

	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.Timeout = healthRequestTimeout
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	return PollUntil(ctx, pollInterval, apiServerReadyTimeout, "kube-apiserver /readyz at "+cp.APIServerURL, []*Process{p}, func(ctx context.Context) (bool, string) {
		var code int
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").Param("verbose", "true").Do(ctx).StatusCode(&code).Raw()
		if err != nil {
			if len(body) > 0 {
				return false, fmt.Sprintf("%v: %s", err, failingChecks(string(body)))
			}
			return false, err.Error()
		}
		return code == http.StatusOK, fmt.Sprintf("HTTP %d", code)
	})
}

// StopAPIServer stops kube-apiserver gracefully (SIGTERM; SIGKILL after a deadline) and waits for
// it to exit; a no-op when it is not running. With certapi's watches open, kube-apiserver 1.37
// often needs the SIGKILL: its graceful shutdown outlasts the 20 s deadline.
func (cp *ControlPlane) StopAPIServer() error {
	return cp.signalAPIServer(syscall.SIGTERM)
}

// KillAPIServer kills kube-apiserver with SIGKILL, as a crash would, and waits for it to exit; a
// no-op when it is not running. StartAPIServer starts it again.
func (cp *ControlPlane) KillAPIServer() error {
	return cp.signalAPIServer(syscall.SIGKILL)
}

// apiServerRunning reports whether kube-apiserver's process runs.
func (cp *ControlPlane) apiServerRunning() bool {
	cp.mu.Lock()
	p := cp.apiserver
	cp.mu.Unlock()
	if p == nil {
		return false
	}
	done, _ := p.Exited()
	return !done
}

func (cp *ControlPlane) signalAPIServer(sig syscall.Signal) error {
	cp.mu.Lock()
	p := cp.apiserver
	cp.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.stop(sig, apiServerStopGrace); err != nil {
		return fmt.Errorf("stopping %s: %w", ProcessKubeAPIServer, err)
	}
	return nil
}

// failingChecks keeps the failing lines of a verbose /readyz answer.
func failingChecks(body string) string {
	var bad []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "[-]") {
			bad = append(bad, l)
		}
	}
	if len(bad) == 0 {
		return body
	}
	return strings.Join(bad, "; ")
}

func (cp *ControlPlane) buildAdminConfig() error {
	caPEM, err := os.ReadFile(cp.PKI.ServerCACert)
	if err != nil {
		return fmt.Errorf("reading server CA: %w", err)
	}
	certPEM, err := os.ReadFile(cp.PKI.AdminCert)
	if err != nil {
		return fmt.Errorf("reading admin certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(cp.PKI.AdminKey)
	if err != nil {
		return fmt.Errorf("reading admin key: %w", err)
	}
	cp.AdminConfig = cp.clientConfig(caPEM, certPEM, keyPEM)
	return nil
}

func (cp *ControlPlane) clientConfig(caPEM, certPEM, keyPEM []byte) *rest.Config {
	return &rest.Config{
		Host: cp.APIServerURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: certPEM,
			KeyData:  keyPEM,
		},
		// A negative QPS disables client-go's client-side rate limiter: tests measure the server.
		QPS:   -1,
		Burst: -1,
	}
}

// UserConfig returns a client config for user (and groups) authenticated by a fresh client
// certificate signed by the client CA, for authorization tests. The user has no permissions
// until RBAC grants some.
func (cp *ControlPlane) UserConfig(user string, groups ...string) (*rest.Config, error) {
	if user == "" {
		return nil, errors.New("UserConfig: user is required")
	}
	kp, err := cp.clientCA.sign(clientTemplate(user, groups))
	if err != nil {
		return nil, fmt.Errorf("issuing client certificate for %q: %w", user, err)
	}
	keyPEM, err := kp.keyPEM()
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.CertData = kp.certPEM
	cfg.KeyData = keyPEM
	return cfg, nil
}

func (cp *ControlPlane) writeKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["certapi-local"] = &clientcmdapi.Cluster{
		Server:                   cp.APIServerURL,
		CertificateAuthorityData: cp.AdminConfig.CAData,
	}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cp.AdminConfig.CertData,
		ClientKeyData:         cp.AdminConfig.KeyData,
	}
	cfg.Contexts["admin@certapi-local"] = &clientcmdapi.Context{Cluster: "certapi-local", AuthInfo: "admin"}
	cfg.CurrentContext = "admin@certapi-local"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// ---------------------------------------------------------------------------------------------
// certapi

// registerAPIService creates (or updates, for a reused Dir) the namespace, the ExternalName
// Service and the APIService that route certapi.dev/v1alpha1 to the local certapi.
// createCertapiNamespace creates CertapiNamespace unless it exists.
func (cp *ControlPlane) createCertapiNamespace(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CertapiNamespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", CertapiNamespace, err)
	}
	return nil
}

func (cp *ControlPlane) registerAPIService(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	agg, err := aggregatorclient.NewForConfig(cp.AdminConfig)
	if err != nil {
		return fmt.Errorf("creating aggregator client: %w", err)
	}

	if err := cp.createCertapiNamespace(ctx); err != nil {
		return err
	}

	port := int32(cp.servicePort()) //nolint:gosec // a TCP port
	svcSpec := corev1.ServiceSpec{
		Type:         corev1.ServiceTypeExternalName,
		ExternalName: "localhost",
		Ports: []corev1.ServicePort{{
			Name:       "https",
			Protocol:   corev1.ProtocolTCP,
			Port:       port,
			TargetPort: intstr.FromInt32(port),
		}},
	}
	svcs := cs.CoreV1().Services(CertapiNamespace)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: CertapiServiceName, Namespace: CertapiNamespace}, Spec: svcSpec}
	if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Service %s/%s: %w", CertapiNamespace, CertapiServiceName, err)
		}
		cur, err := svcs.Get(ctx, CertapiServiceName, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting Service %s/%s: %w", CertapiNamespace, CertapiServiceName, err)
		}
		if cur.Spec.Type != corev1.ServiceTypeExternalName {
			// A Service cannot simply change type with a ClusterIP set; recreate it.
			if err := svcs.Delete(ctx, CertapiServiceName, metav1.DeleteOptions{}); err != nil {
				return fmt.Errorf("deleting Service %s/%s: %w", CertapiNamespace, CertapiServiceName, err)
			}
			if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("re-creating Service %s/%s: %w", CertapiNamespace, CertapiServiceName, err)
			}
		} else {
			cur.Spec.ExternalName = svcSpec.ExternalName
			cur.Spec.Ports = svcSpec.Ports
			if _, err := svcs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
				return fmt.Errorf("updating Service %s/%s: %w", CertapiNamespace, CertapiServiceName, err)
			}
		}
	}

	apiSvcSpec := apiregistrationv1.APIServiceSpec{
		Group:                CertapiGroup,
		Version:              CertapiVersion,
		Service:              &apiregistrationv1.ServiceReference{Namespace: CertapiNamespace, Name: CertapiServiceName, Port: &port},
		GroupPriorityMinimum: 1000,
		VersionPriority:      15,
	}
	apiSvcs := agg.ApiregistrationV1().APIServices()
	// No caBundle: certapi injects its own CA into its APIService, as in a real installation.
	apiSvc := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: CertapiAPIService,
		Annotations: map[string]string{"certapi.dev/inject-ca-bundle": "true"}}, Spec: apiSvcSpec}
	if _, err := apiSvcs.Create(ctx, apiSvc, metav1.CreateOptions{}); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating APIService %s: %w", CertapiAPIService, err)
		}
		cur, err := apiSvcs.Get(ctx, CertapiAPIService, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("getting APIService %s: %w", CertapiAPIService, err)
		}
		apiSvcSpec.CABundle = cur.Spec.CABundle // what certapi injected stays
		cur.Spec = apiSvcSpec
		if _, err := apiSvcs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("updating APIService %s: %w", CertapiAPIService, err)
		}
	}
	return nil
}

// WaitAPIServiceAvailable waits until the APIService v1alpha1.certapi.dev has condition
// Available=True and kube-apiserver answers a discovery request for certapi.dev/v1alpha1 by
// proxying it to certapi (the condition alone can be stale right after a certapi restart). On
// timeout the error carries the condition's reason and message. It fails early when no certapi
// replica is running.
func (cp *ControlPlane) WaitAPIServiceAvailable(ctx context.Context) error {
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.Timeout = healthRequestTimeout
	agg, err := aggregatorclient.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating aggregator client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating admin client: %w", err)
	}
	return PollUntil(ctx, pollInterval, apiServiceReadyTimeout, "APIService "+CertapiAPIService+" Available", cp.replicaProcs(), func(ctx context.Context) (bool, string) {
		s, err := agg.ApiregistrationV1().APIServices().Get(ctx, CertapiAPIService, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := apiregistrationv1helper.GetAPIServiceConditionByType(s, apiregistrationv1.Available)
		if c == nil {
			return false, "no Available condition yet"
		}
		status := fmt.Sprintf("Available=%s reason=%s message=%q", c.Status, c.Reason, c.Message)
		if c.Status != apiregistrationv1.ConditionTrue {
			return false, status
		}
		if _, err := cs.Discovery().ServerResourcesForGroupVersion(CertapiGroup + "/" + CertapiVersion); err != nil {
			return false, fmt.Sprintf("%s; discovery of %s/%s through kube-apiserver: %v", status, CertapiGroup, CertapiVersion, err)
		}
		return true, status
	})
}

// ---------------------------------------------------------------------------------------------
// Stop

// Stop stops everything Start started — the certapi replicas (concurrently), the round-robin
// proxy, kube-apiserver, then etcd — with SIGTERM and SIGKILL after a deadline, and waits for the
// processes and the proxy's goroutines to end. It is idempotent and safe to call on a partly
// started control plane. Data and logs stay in Dir.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	cp.stopped = true
	certapis := make([]*Process, 0, len(cp.replicas))
	for _, r := range cp.replicas {
		if r.proc != nil {
			certapis = append(certapis, r.proc)
		}
	}
	proxy, proxyLog := cp.proxy, cp.proxyLog
	apiserver := cp.apiserver
	node := cp.ClusterNode
	var etcds []*Process
	for _, m := range cp.etcdMembers {
		if m.proc != nil {
			etcds = append(etcds, m.proc)
		}
	}
	cp.mu.Unlock()

	var wg sync.WaitGroup
	for _, p := range certapis {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.stop(syscall.SIGTERM, certapiStopGrace); err != nil {
				cp.progress("stopping %s: %v", p.name, err)
			}
		}()
	}
	wg.Wait()
	if node != nil {
		// Before kube-apiserver: the node's pods are deleted through it.
		node.stop()
	}
	if proxy != nil {
		proxy.Close()
	}
	if proxyLog != nil {
		proxyLog.Close()
	}
	if apiserver != nil {
		if err := apiserver.stop(syscall.SIGTERM, apiServerStopGrace); err != nil {
			cp.progress("stopping %s: %v", apiserver.name, err)
		}
	}
	for _, p := range etcds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.stop(syscall.SIGTERM, etcdStopGrace); err != nil {
				cp.progress("stopping %s: %v", p.name, err)
			}
		}()
	}
	wg.Wait()
}

// ---------------------------------------------------------------------------------------------
// helpers

// PollUntil calls cond every interval, the first time at once, until it reports done, timeout
// passes, ctx ends, or every process of procs (when there are any) has exited. cond's status
// string, what it saw last, goes into the error on timeout, with the last lines of the processes'
// logs; when the processes exited the error is their ExitError. The error starts "waiting for
// <what>: ".
func PollUntil(ctx context.Context, interval, timeout time.Duration, what string, procs []*Process, cond func(context.Context) (bool, string)) error {
	var last string
	var exited error
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		if len(procs) > 0 {
			var errs []error
			for _, p := range procs {
				if done, _ := p.Exited(); !done {
					break
				}
				errs = append(errs, p.ExitError())
			}
			if len(errs) == len(procs) {
				exited = errors.Join(errs...)
				return false, exited
			}
		}
		ok, status := cond(ctx)
		last = status
		return ok, nil
	})
	switch {
	case err == nil:
		return nil
	case exited != nil:
		return fmt.Errorf("waiting for %s: %w", what, exited)
	default:
		msg := fmt.Sprintf("waiting for %s: gave up after %s (%v); last status: %s", what, since(start), err, last)
		for _, p := range procs {
			msg += fmt.Sprintf("\nlast lines of %s:\n%s", p.logPath, tailFile(p.logPath, 30))
		}
		return errors.New(msg)
	}
}

// HTTPGet GETs url with client and returns the first 64 KiB of the body and the status code.
func HTTPGet(ctx context.Context, client *http.Client, url string) (string, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", resp.StatusCode, err
	}
	return string(body), resp.StatusCode, nil
}

// Ports the framework picks itself lie in [minStaticPort, start of the kernel's ephemeral range).
const minStaticPort = 20000

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago, none of them in
// exclude, for processes the caller starts next to a control plane. Like the control plane's own
// ports they lie below the kernel's ephemeral range when it is known (see freePort).
func FreePorts(n int, exclude ...int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		if !slices.Contains(exclude, p) && !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. It prefers a port below the
// kernel's ephemeral range: a process restarted on its port (StartReplica, StartCertapi) could
// otherwise find it taken by the source port of some outgoing loopback connection meanwhile.
func freePort() (int, error) {
	if lo := ephemeralPortStart(); lo > minStaticPort+1000 {
		for range 100 {
			p := minStaticPort + rand.IntN(lo-minStaticPort)
			if portFree(p) {
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralPortStart returns the first port of the kernel's ephemeral range, or 0 when unknown.
func ephemeralPortStart() int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(data))
	if len(fields) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(fields[0])
	if err != nil || lo > 65535 {
		return 0
	}
	return lo
}

// portFree reports whether port can be bound on 127.0.0.1 now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
