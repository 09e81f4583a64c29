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
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
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
	// given to every replica as --encryption-provider-config. See testhelpers.AESCBCEncryptionConfig.
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
	// images (see ImageArchive), for pods with imagePullPolicy Never or IfNotPresent; with WorkerNodes,
	// into every node's.
	NodeImages []string
	// WorkerNodes, with Node, adds that many worker nodes (ControlPlane.Workers), each in a network
	// namespace of its own with its own containerd, kubelet and kube-proxy, its pods routed to the other
	// nodes' through the machine, and its own zone (topology.kubernetes.io/zone=zone-<i>). The first node
	// then becomes the control-plane node: it runs kube-controller-manager, kube-scheduler and CoreDNS and
	// is tainted node-role.kubernetes.io/control-plane:NoSchedule, so that workloads land on the workers,
	// where the faults of a lost node can be made (ClusterNode.StopHard, ControlPlane.Partition, ...).
	WorkerNodes int
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
	// Workers are the worker nodes (Options.WorkerNodes), certapi-node-1 first.
	Workers []*ClusterNode

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
	// netFaults are the network faults between nodes in place (nodefaults.go), in nodesChain.
	netFaults []netFault
	// forwardMu serializes the writes of nodesChain (syncNodeForwarding), which stop once Stop has
	// removed it (forwardingRemoved).
	forwardMu         sync.Mutex
	forwardingRemoved bool

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
		if _, err := cp.AddWorkers(ctx, opts.WorkerNodes); err != nil {
			return cp, err
		}
	} else if opts.WorkerNodes > 0 {
		return cp, errors.New("framework.Options.WorkerNodes needs Options.Node")
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
