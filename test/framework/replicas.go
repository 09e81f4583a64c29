package framework

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// replica is one certapi slot: a fixed name, port and command line, and the process running in
// it (nil before its first start).
type replica struct {
	index int
	name  string
	port  int
	url   string
	args  []string

	// startMu serialises starting and stopping this slot (not the wait for readiness).
	startMu sync.Mutex
	proc    *Process // guarded by ControlPlane.mu
}

// LeaderIdentityArgs returns --leader-identity=certapi-<i>, for Options.CertapiReplicaArgs once
// certapi has that flag (a flag certapi lacks makes it exit at start).
func LeaderIdentityArgs(i int) []string {
	return []string{"--leader-identity=" + ProcessCertapi + "-" + strconv.Itoa(i)}
}

func (cp *ControlPlane) newReplicas(n int, ports *portSet) []*replica {
	rs := make([]*replica, n)
	for i := range rs {
		port := ports.Certapi
		name := ProcessCertapi
		if n > 1 {
			name = ProcessCertapi + "-" + strconv.Itoa(i)
			if i > 0 {
				port = ports.CertapiReplicas[i-1]
			}
		}
		rs[i] = &replica{
			index: i,
			name:  name,
			port:  port,
			url:   "https://127.0.0.1:" + strconv.Itoa(port),
		}
		rs[i].args = cp.buildCertapiArgs(rs[i], n)
	}
	return rs
}

func (cp *ControlPlane) buildCertapiArgs(r *replica, replicas int) []string {
	var args []string
	if cp.opts.CertapiEmbeddedEtcd {
		args = append(args, "--data-dir="+filepath.Join(cp.Dir, "certapi-data"))
	} else {
		args = append(args, "--etcd-servers="+cp.etcdServers())
	}
	args = append(args,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(r.port),
		// certapi serves itself: a certificate from its own CA for this Service, trusted by
		// kube-apiserver through the caBundle certapi injects into its own APIService.
		"--service-name="+CertapiServiceName,
		"--service-namespace="+CertapiNamespace,
		"--kubeconfig="+cp.Kubeconfig,
		"--authentication-kubeconfig="+cp.Kubeconfig,
		"--authorization-kubeconfig="+cp.Kubeconfig,
		"-v=4",
	)
	if replicas <= 1 {
		// The shutdown delay moves kube-apiserver's pooled connections to the other replicas; a single
		// replica has none to move them to, and every test would wait for it at the end.
		args = append(args, "--shutdown-delay-duration=0s")
	}
	if cp.EncryptionConfigFile != "" {
		args = append(args, "--encryption-provider-config="+cp.EncryptionConfigFile)
	}
	args = append(args, cp.opts.CertapiArgs...)
	if cp.opts.CertapiReplicaArgs != nil {
		args = append(args, cp.opts.CertapiReplicaArgs(r.index)...)
	}
	return args
}

// Replicas returns the number of certapi replicas (0 with SkipCertapi).
func (cp *ControlPlane) Replicas() int { return len(cp.replicas) }

// ReplicaName returns the process name of replica i, its key in Logs: "certapi" with a single
// replica, "certapi-<i>" with several; "" when there is no such replica.
func (cp *ControlPlane) ReplicaName(i int) string {
	if i < 0 || i >= len(cp.replicas) {
		return ""
	}
	return cp.replicas[i].name
}

func (cp *ControlPlane) replica(i int) (*replica, error) {
	if cp.opts.SkipCertapi || cp.certapiBin == "" || len(cp.replicas) == 0 {
		return nil, errors.New("the control plane was started with SkipCertapi")
	}
	if i < 0 || i >= len(cp.replicas) {
		return nil, fmt.Errorf("no certapi replica %d: there are %d", i, len(cp.replicas))
	}
	return cp.replicas[i], nil
}

// StartCertapi (re)starts every certapi replica with the flags, ports and data dir of Start,
// concurrently: each running one is stopped gracefully first, then started, and StartCertapi
// waits for every replica's /readyz. It does not wait for the APIService; see
// WaitAPIServiceAvailable. With a single replica this is StartReplica(ctx, 0).
func (cp *ControlPlane) StartCertapi(ctx context.Context) error {
	if _, err := cp.replica(0); err != nil {
		return fmt.Errorf("StartCertapi: %w", err)
	}
	return cp.eachReplica(func(i int) error { return cp.StartReplica(ctx, i) })
}

// StopCertapi stops every certapi replica gracefully (SIGTERM; SIGKILL after a deadline),
// concurrently, and waits for them to exit. Replicas not running are skipped.
func (cp *ControlPlane) StopCertapi() error {
	return cp.eachReplica(cp.StopReplica)
}

// KillCertapi kills every certapi replica with SIGKILL and waits for them to exit.
func (cp *ControlPlane) KillCertapi() error {
	return cp.eachReplica(cp.KillReplica)
}

// CertapiRunning reports whether any certapi replica is running.
func (cp *ControlPlane) CertapiRunning() bool {
	for i := range cp.replicas {
		if cp.ReplicaRunning(i) {
			return true
		}
	}
	return false
}

// eachReplica runs f for every replica, concurrently when there are several, and joins the errors.
func (cp *ControlPlane) eachReplica(f func(i int) error) error {
	switch len(cp.replicas) {
	case 0:
		return nil
	case 1:
		return f(0)
	}
	errs := make([]error, len(cp.replicas))
	var wg sync.WaitGroup
	for i := range cp.replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StartReplica starts certapi replica i (0-based), stopping it gracefully first if it runs, and
// waits for its /readyz.
func (cp *ControlPlane) StartReplica(ctx context.Context, i int) error {
	r, err := cp.replica(i)
	if err != nil {
		return fmt.Errorf("StartReplica: %w", err)
	}
	p, err := cp.launchReplica(r)
	if err != nil {
		return err
	}
	cp.setRouted(i, true)
	// Readiness only: the replica's certificate comes from certapi's own CA, which the framework learns
	// only once certapi runs. Trust is proven through kube-apiserver (APIService Available) and by tests.
	client, err := cp.certapiHTTPClientTrusting(nil)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	return PollUntil(ctx, pollInterval, certapiReadyTimeout, r.name+" /readyz at "+r.url, []*Process{p}, func(ctx context.Context) (bool, string) {
		body, code, err := HTTPGet(ctx, client, r.url+"/readyz?verbose=true")
		if err != nil {
			return false, err.Error()
		}
		if code != http.StatusOK {
			return false, fmt.Sprintf("HTTP %d: %s", code, failingChecks(body))
		}
		return true, ""
	})
}

func (cp *ControlPlane) launchReplica(r *replica) (*Process, error) {
	r.startMu.Lock()
	defer r.startMu.Unlock()
	if err := cp.stopReplica(r, syscall.SIGTERM); err != nil {
		return nil, err
	}
	return cp.launch(r.name, cp.certapiBin, r.args, &r.proc)
}

// StopReplica stops certapi replica i gracefully, the way a pod is deleted: the round-robin proxy
// stops sending it new connections first (its endpoint is removed), then it gets SIGTERM (SIGKILL
// after a deadline); StopReplica waits for it to exit. It is a no-op when the replica is not running.
// StartReplica puts it back in rotation.
func (cp *ControlPlane) StopReplica(i int) error {
	cp.setRouted(i, false)
	return cp.signalReplica(i, syscall.SIGTERM)
}

// setRouted puts replica i in or out of the round-robin proxy's rotation (no-op without a proxy).
func (cp *ControlPlane) setRouted(i int, routed bool) {
	cp.mu.Lock()
	proxy := cp.proxy
	cp.mu.Unlock()
	if proxy != nil {
		proxy.SetRouted(i, routed)
	}
}

// KillReplica kills certapi replica i with SIGKILL and waits for it to exit. It is a no-op when
// the replica is not running.
func (cp *ControlPlane) KillReplica(i int) error {
	return cp.signalReplica(i, syscall.SIGKILL)
}

func (cp *ControlPlane) signalReplica(i int, sig syscall.Signal) error {
	if i < 0 || i >= len(cp.replicas) {
		return fmt.Errorf("no certapi replica %d: there are %d", i, len(cp.replicas))
	}
	r := cp.replicas[i]
	r.startMu.Lock()
	defer r.startMu.Unlock()
	return cp.stopReplica(r, sig)
}

// stopReplica signals r's process and waits for it; the caller holds r.startMu.
func (cp *ControlPlane) stopReplica(r *replica, sig syscall.Signal) error {
	cp.mu.Lock()
	p := r.proc
	cp.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.stop(sig, certapiStopGrace); err != nil {
		return fmt.Errorf("stopping %s: %w", r.name, err)
	}
	return nil
}

// PauseReplica stops certapi replica i with SIGSTOP, as a long GC stall or a frozen VM would: its
// sockets stay open (connections to it are accepted by the kernel and then hang, and the proxy
// still routes to it) but it runs nothing until ResumeReplica. StopReplica and KillReplica work on
// a paused replica.
func (cp *ControlPlane) PauseReplica(i int) error {
	p := cp.runningReplicaProc(i)
	if p == nil {
		return fmt.Errorf("PauseReplica: certapi replica %d is not running", i)
	}
	return p.Pause()
}

// ResumeReplica continues certapi replica i after PauseReplica (SIGCONT).
func (cp *ControlPlane) ResumeReplica(i int) error {
	p := cp.runningReplicaProc(i)
	if p == nil {
		return fmt.Errorf("ResumeReplica: certapi replica %d is not running", i)
	}
	return p.Resume()
}

// ReplicaRunning reports whether certapi replica i is running.
func (cp *ControlPlane) ReplicaRunning(i int) bool {
	return cp.runningReplicaProc(i) != nil
}

// ReplicaPID returns the process id of certapi replica i while it runs, and 0 when it does not (or
// there is no such replica): for reading the replica's memory or threads from /proc.
func (cp *ControlPlane) ReplicaPID(i int) int {
	if p := cp.runningReplicaProc(i); p != nil {
		return p.Pid()
	}
	return 0
}

// PIDs returns the process ids of the etcd members, kube-apiserver and certapi replicas that run, by
// their log names ("etcd", "kube-apiserver", "certapi-0", ...): for reading their CPU time or memory
// from /proc.
func (cp *ControlPlane) PIDs() map[string]int {
	pids := map[string]int{}
	cp.mu.Lock()
	if cp.apiserver != nil {
		pids["kube-apiserver"] = cp.apiserver.Pid()
	}
	for _, m := range cp.etcdMembers {
		if m.proc != nil {
			pids[m.name] = m.proc.Pid()
		}
	}
	cp.mu.Unlock()
	for i := range cp.replicas {
		if pid := cp.ReplicaPID(i); pid != 0 {
			pids[cp.ReplicaName(i)] = pid
		}
	}
	return pids
}

// runningReplicaProc returns the process of certapi replica i, or nil when it is not running.
func (cp *ControlPlane) runningReplicaProc(i int) *Process {
	if i < 0 || i >= len(cp.replicas) {
		return nil
	}
	cp.mu.Lock()
	p := cp.replicas[i].proc
	cp.mu.Unlock()
	if p == nil {
		return nil
	}
	if done, _ := p.Exited(); done {
		return nil
	}
	return p
}

// replicaProcs returns the processes last started in every replica slot.
func (cp *ControlPlane) replicaProcs() []*Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var ps []*Process
	for _, r := range cp.replicas {
		if r.proc != nil {
			ps = append(ps, r.proc)
		}
	}
	return ps
}

// CertapiReplicaURL returns https://127.0.0.1:<port> of certapi replica i, to talk to it directly
// rather than through the proxy or kube-apiserver; "" when there is no such replica.
func (cp *ControlPlane) CertapiReplicaURL(i int) string {
	if i < 0 || i >= len(cp.replicas) {
		return ""
	}
	return cp.replicas[i].url
}

// CertapiReplicaConfig returns a client config for certapi replica i directly (not through
// kube-apiserver): its URL, the framework's certapi serving CA as trust, the admin client
// certificate (which certapi's delegated authentication accepts) and no client-side rate limit.
// Use it with the generated clientset or a discovery client.
func (cp *ControlPlane) CertapiReplicaConfig(i int) (*rest.Config, error) {
	if i < 0 || i >= len(cp.replicas) {
		return nil, fmt.Errorf("no certapi replica %d: there are %d", i, len(cp.replicas))
	}
	return cp.certapiConfigAt(context.Background(), cp.replicas[i].url)
}

// certapiConfigAt is the admin client config for the certapi server at url, its serving certificate
// verified against certapi's CA bundle for the Service's name, as kube-apiserver verifies it.
func (cp *ControlPlane) certapiConfigAt(ctx context.Context, url string) (*rest.Config, error) {
	bundle, err := cp.CertapiTrustBundle(ctx)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(cp.AdminConfig)
	cfg.Host = url
	cfg.CAData = bundle
	cfg.ServerName = CertapiServiceName + "." + CertapiNamespace + ".svc"
	return cfg, nil
}

// CertapiPodConfig returns a client config for the certapi pod at podIP (Options.Node), past the Service
// that picks a replica for kube-apiserver, as CertapiReplicaConfig does for a process: the admin client
// certificate, certapi's serving certificate verified against its CA bundle for the Service's name, as
// kube-apiserver verifies it. A test reads what that one replica answers.
func (cp *ControlPlane) CertapiPodConfig(ctx context.Context, podIP string) (*rest.Config, error) {
	if podIP == "" {
		return nil, errors.New("CertapiPodConfig: the pod has no IP")
	}
	return cp.certapiConfigAt(ctx, "https://"+net.JoinHostPort(podIP, "8443"))
}

// CertapiTrustBundle returns certapi's own CA bundle (CertificateAuthority/default status.caBundle, read
// through kube-apiserver): what a client of certapi's serving certificates must trust.
func (cp *ControlPlane) CertapiTrustBundle(ctx context.Context) ([]byte, error) {
	var bundle []byte
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		cs, err := kubernetes.NewForConfig(cp.AdminConfig)
		if err != nil {
			return false, err
		}
		raw, err := cs.Discovery().RESTClient().Get().AbsPath("/apis/certapi.dev/v1alpha1/certificateauthorities/default").DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		var ca struct {
			Status struct {
				CABundle string `json:"caBundle"`
			} `json:"status"`
		}
		if err := json.Unmarshal(raw, &ca); err != nil || ca.Status.CABundle == "" {
			return false, nil
		}
		bundle = []byte(ca.Status.CABundle)
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading certapi's CA bundle from CertificateAuthority/default: %w", err)
	}
	return bundle, nil
}

// CertapiHTTPClient returns an HTTP client that trusts certapi's own CA bundle and presents the admin
// client certificate, for talking to certapi directly (not through kube-apiserver), e.g. to its
// /metrics or /readyz at CertapiURL or CertapiReplicaURL(i).
func (cp *ControlPlane) CertapiHTTPClient() (*http.Client, error) {
	bundle, err := cp.CertapiTrustBundle(context.Background())
	if err != nil {
		return nil, err
	}
	return cp.certapiHTTPClientTrusting(bundle)
}

// certapiHTTPClientTrusting trusts bundle; with a nil bundle it checks no server certificate, which
// only the readiness probe uses.
func (cp *ControlPlane) certapiHTTPClientTrusting(bundle []byte) (*http.Client, error) {
	pool := x509.NewCertPool()
	if bundle != nil && !pool.AppendCertsFromPEM(bundle) {
		return nil, errors.New("no certificate in the certapi CA bundle")
	}
	admin, err := tls.X509KeyPair(cp.AdminConfig.CertData, cp.AdminConfig.KeyData)
	if err != nil {
		return nil, fmt.Errorf("loading admin key pair: %w", err)
	}
	return &http.Client{
		Timeout: healthRequestTimeout,
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{
				RootCAs:            pool,
				InsecureSkipVerify: bundle == nil, // readiness probe only, see above
				// certapi's certificate names its Service, as kube-apiserver checks it, not 127.0.0.1.
				ServerName:   CertapiServiceName + "." + CertapiNamespace + ".svc",
				Certificates: []tls.Certificate{admin},
				MinVersion:   tls.VersionTLS12,
			},
		},
	}, nil
}

// servicePort is the port the ExternalName Service and the APIService point at.
func (cp *ControlPlane) servicePort() int {
	if cp.ProxyPort != 0 {
		return cp.ProxyPort
	}
	return cp.CertapiPort
}

// startProxy starts the round-robin proxy in front of the replicas, logging to
// <Dir>/logs/certapi-proxy.log.
func (cp *ControlPlane) startProxy() error {
	logPath := cp.logPath(ProcessCertapiProxy)
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening log of %s: %w", ProcessCertapiProxy, err)
	}
	backends := make([]string, len(cp.replicas))
	names := make([]string, len(cp.replicas))
	for i, r := range cp.replicas {
		backends[i] = "127.0.0.1:" + strconv.Itoa(r.port)
		names[i] = r.name
	}
	proxy, err := newRRProxy("127.0.0.1:0", backends, names, logFile)
	if err != nil {
		logFile.Close()
		return err
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.logs[ProcessCertapiProxy] = logPath
	if cp.stopped {
		proxy.Close()
		logFile.Close()
		return errors.New("starting the certapi proxy: control plane is stopped")
	}
	cp.proxy, cp.proxyLog = proxy, logFile
	cp.ProxyPort = proxy.Port()
	return nil
}

// ProxyOpenConnections returns the number of connections open through the round-robin proxy to
// each replica, by replica index (nil without a proxy). kube-apiserver keeps one long-lived
// connection for the requests it proxies to certapi (its availability checks use short-lived
// ones), so a replica with an open connection is the one serving kube-apiserver's traffic.
func (cp *ControlPlane) ProxyOpenConnections() []int {
	cp.mu.Lock()
	proxy := cp.proxy
	cp.mu.Unlock()
	if proxy == nil {
		return nil
	}
	return proxy.Open()
}

// ProxyRoutes returns, for every connection the round-robin proxy has routed so far, the index
// of the replica it went to, in order (nil without a proxy). ProxyRoutes()[0] is the replica
// kube-apiserver reached first. A replica that was down is never in the list for the time it was
// down: the proxy skipped it.
func (cp *ControlPlane) ProxyRoutes() []int {
	cp.mu.Lock()
	proxy := cp.proxy
	cp.mu.Unlock()
	if proxy == nil {
		return nil
	}
	return proxy.Routes()
}
