package framework_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestControlPlaneStarts starts etcd and kube-apiserver, lists namespaces as admin, and checks
// that a user without RBAC bindings is forbidden.
func TestControlPlaneStarts(t *testing.T) {
	start := time.Now()
	cp := framework.StartT(t, framework.Options{SkipCertapi: true})
	t.Logf("control plane started in %s", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	admin, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatalf("admin clientset: %v", err)
	}
	nss, err := admin.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing namespaces as admin: %v", err)
	}
	names := map[string]bool{}
	for _, ns := range nss.Items {
		names[ns.Name] = true
	}
	for _, want := range []string{"default", "kube-system"} {
		if !names[want] {
			t.Errorf("namespace %q missing from %v", want, names)
		}
	}

	aliceCfg, err := cp.UserConfig("alice", "developers")
	if err != nil {
		t.Fatalf("UserConfig: %v", err)
	}
	alice, err := kubernetes.NewForConfig(aliceCfg)
	if err != nil {
		t.Fatalf("alice clientset: %v", err)
	}
	_, err = alice.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("listing namespaces as alice: got %v, want 403 Forbidden", err)
	}
	if status, ok := err.(apierrors.APIStatus); ok && !strings.Contains(status.Status().Message, `"alice"`) {
		t.Errorf("forbidden message %q does not name alice", status.Status().Message)
	}

	for name, path := range cp.Logs() {
		t.Logf("log %s: %s", name, path)
	}
}

// TestCertapiRestart starts the whole stack with certapi built from ./cmd/certapi, then stops,
// restarts and kills certapi and checks that kube-apiserver routes to it again each time.
func TestCertapiRestart(t *testing.T) {
	cp := framework.StartT(t, framework.Options{})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	admin, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatalf("admin clientset: %v", err)
	}
	checkDiscovery := func(when string) {
		t.Helper()
		if _, err := admin.Discovery().ServerResourcesForGroupVersion("certapi.dev/v1alpha1"); err != nil {
			t.Fatalf("%s: discovery of certapi.dev/v1alpha1 through kube-apiserver: %v", when, err)
		}
	}
	checkDiscovery("after Start")

	if err := cp.StopCertapi(); err != nil {
		t.Fatalf("StopCertapi: %v", err)
	}
	if cp.CertapiRunning() {
		t.Fatal("certapi still running after StopCertapi")
	}
	if err := cp.StartCertapi(ctx); err != nil {
		t.Fatalf("StartCertapi after stop: %v", err)
	}
	if err := cp.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatalf("after restart: %v", err)
	}
	checkDiscovery("after StopCertapi+StartCertapi")

	if err := cp.KillCertapi(); err != nil {
		t.Fatalf("KillCertapi: %v", err)
	}
	if err := cp.StartCertapi(ctx); err != nil {
		t.Fatalf("StartCertapi after kill: %v", err)
	}
	if err := cp.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatalf("after kill and restart: %v", err)
	}
	checkDiscovery("after KillCertapi+StartCertapi")
}

// TestCertapiReplicas starts three certapi replicas concurrently on one etcd behind the
// framework's round-robin proxy, with an encryption config, and checks: discovery through
// kube-apiserver; each replica directly; that an object written through kube-apiserver is
// encrypted in etcd and readable from every replica; that killing the replica kube-apiserver's
// connection goes to (through the proxy) keeps the API served through kube-apiserver and the proxy
// never routes to the dead replica; a restart and a graceful stop of single replicas; and that
// Stop leaves no process behind.
func TestCertapiReplicas(t *testing.T) {
	const n = 3
	enc, err := testhelpers.AESCBCEncryptionConfig("servingcertrequests.certapi.dev")
	if err != nil {
		t.Fatal(err)
	}
	opts := framework.Options{CertapiReplicas: n, EncryptionConfig: enc}
	if certapiHasFlag(t, "leader-identity") {
		opts.CertapiReplicaArgs = framework.LeaderIdentityArgs
	} else {
		t.Log("certapi has no --leader-identity flag yet; replicas run without it")
	}
	start := time.Now()
	cp := framework.StartT(t, opts)
	t.Logf("control plane with %d certapi replicas started in %s", n, time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The API of the framework.
	if got := cp.Replicas(); got != n {
		t.Fatalf("Replicas() = %d, want %d", got, n)
	}
	if cp.ProxyPort == 0 {
		t.Fatal("ProxyPort is 0 with several replicas")
	}
	logs := cp.Logs()
	ports := map[string]bool{strconv.Itoa(cp.ProxyPort): true}
	for i := range n {
		name := fmt.Sprintf("certapi-%d", i)
		if got := cp.ReplicaName(i); got != name {
			t.Errorf("ReplicaName(%d) = %q, want %q", i, got, name)
		}
		if logs[name] == "" {
			t.Errorf("no log %q in %v", name, logs)
		}
		if !cp.ReplicaRunning(i) {
			t.Errorf("replica %d is not running", i)
		}
		if !logContains(t, logs[name], "--encryption-provider-config="+filepath.Join(cp.Dir, framework.EncryptionConfigFileName)) {
			t.Errorf("replica %d was not given --encryption-provider-config", i)
		}
		u := cp.CertapiReplicaURL(i)
		_, port, err := net.SplitHostPort(strings.TrimPrefix(u, "https://"))
		if err != nil {
			t.Fatalf("CertapiReplicaURL(%d) = %q: %v", i, u, err)
		}
		if ports[port] {
			t.Errorf("replica %d shares port %s", i, port)
		}
		ports[port] = true
	}
	if cp.CertapiURL != cp.CertapiReplicaURL(0) {
		t.Errorf("CertapiURL %s is not replica 0's URL %s", cp.CertapiURL, cp.CertapiReplicaURL(0))
	}

	// Discovery of certapi.dev/v1alpha1 through kube-apiserver, which reaches a replica through the proxy.
	admin, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	const gv = framework.CertapiGroup + "/" + framework.CertapiVersion
	resources, err := admin.Discovery().ServerResourcesForGroupVersion(gv)
	if err != nil {
		t.Fatalf("discovery of %s through kube-apiserver: %v", gv, err)
	}
	if !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "servingcertrequests" }) {
		t.Fatalf("discovery of %s lacks servingcertrequests: %+v", gv, resources.APIResources)
	}

	// An object written through kube-apiserver is stored encrypted and every replica reads it directly.
	const scr = "framework-replicas"
	scrPath := "/apis/" + gv + "/namespaces/default/servingcertrequests/"
	body := `{"apiVersion":"` + gv + `","kind":"ServingCertRequest","metadata":{"name":"` + scr + `"},"spec":{"serviceName":"web"}}`
	if err := admin.Discovery().RESTClient().Post().AbsPath(scrPath).SetHeader("Content-Type", "application/json").
		Body([]byte(body)).Do(ctx).Error(); err != nil {
		t.Fatalf("creating ServingCertRequest %s through kube-apiserver: %v", scr, err)
	}
	etcd, err := cp.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	key := framework.CertapiEtcdPrefix + "/servingcertrequests/default/" + scr
	kv, err := etcd.Get(ctx, key)
	if err != nil {
		t.Fatalf("reading %s from etcd: %v", key, err)
	}
	if len(kv.Kvs) != 1 {
		t.Fatalf("key %s not in etcd", key)
	}
	if v := kv.Kvs[0].Value; !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key1:")) || bytes.Contains(v, []byte(`"serviceName"`)) {
		t.Fatalf("%s is not aescbc-encrypted in etcd: %.60q", key, v)
	}
	for i := range n {
		cfg, err := cp.CertapiReplicaConfig(i)
		if err != nil {
			t.Fatal(err)
		}
		dc, err := discovery.NewDiscoveryClientForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dc.ServerResourcesForGroupVersion(gv); err != nil {
			t.Fatalf("discovery of %s from replica %d directly: %v", gv, i, err)
		}
		if err := dc.RESTClient().Get().AbsPath(scrPath + scr).Do(ctx).Error(); err != nil {
			t.Fatalf("reading %s from replica %d directly: %v", scr, i, err)
		}
	}

	// Kill the replica that serves kube-apiserver's long-lived connection (the one the proxy
	// routed kube-apiserver's proxied requests to): the API stays served through kube-apiserver,
	// the proxy closes kube-apiserver's side of the dead connection, and never routes to the dead
	// replica.
	routes := cp.ProxyRoutes()
	if len(routes) == 0 {
		t.Fatal("the proxy routed no connection, yet kube-apiserver reached certapi")
	}
	open := cp.ProxyOpenConnections()
	first := routes[0]
	for i, c := range open {
		if c > open[first] {
			first = i
		}
	}
	if open[first] == 0 {
		t.Logf("no connection open through the proxy; killing the replica of the first connection")
	}
	t.Logf("proxy routes before the kill: %v, open connections per replica %v; killing replica %d", routes, open, first)
	if err := cp.KillReplica(first); err != nil {
		t.Fatalf("KillReplica(%d): %v", first, err)
	}
	if cp.ReplicaRunning(first) {
		t.Fatalf("replica %d still running after KillReplica", first)
	}
	killedAt := len(routes)
	served := func(when string) {
		t.Helper()
		start := time.Now()
		var lastErr error
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if _, err := admin.Discovery().ServerResourcesForGroupVersion(gv); err != nil {
				lastErr = fmt.Errorf("discovery: %w", err)
				return false, nil
			}
			if err := admin.Discovery().RESTClient().Get().AbsPath(scrPath + scr).Do(ctx).Error(); err != nil {
				lastErr = fmt.Errorf("get %s: %w", scr, err)
				return false, nil
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("%s: certapi not served through kube-apiserver within a minute: %v; last error: %v", when, err, lastErr)
		}
		t.Logf("%s: served through kube-apiserver after %s", when, time.Since(start).Round(time.Millisecond))
	}
	served(fmt.Sprintf("after killing replica %d", first))
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cp.ProxyOpenConnections()[first] == 0, nil
	}); err != nil {
		t.Fatalf("connections to the dead replica %d stay open through the proxy: %v", first, cp.ProxyOpenConnections())
	}
	routes = cp.ProxyRoutes()
	if slices.Contains(routes[killedAt:], first) {
		t.Fatalf("the proxy routed to the dead replica %d: routes %v (kill after %d)", first, routes, killedAt)
	}
	t.Logf("proxy routes after the kill: %v", routes[killedAt:])

	// Restart it, then stop another one gracefully.
	restartStart := time.Now()
	if err := cp.StartReplica(ctx, first); err != nil {
		t.Fatalf("StartReplica(%d): %v", first, err)
	}
	if !cp.ReplicaRunning(first) {
		t.Fatalf("replica %d not running after StartReplica", first)
	}
	t.Logf("StartReplica(%d) took %s", first, time.Since(restartStart).Round(time.Millisecond))
	other := (first + 1) % n
	stopStart := time.Now()
	if err := cp.StopReplica(other); err != nil {
		t.Fatalf("StopReplica(%d): %v", other, err)
	}
	if cp.ReplicaRunning(other) {
		t.Fatalf("replica %d still running after StopReplica", other)
	}
	t.Logf("StopReplica(%d) took %s", other, time.Since(stopStart).Round(time.Millisecond))
	served(fmt.Sprintf("after restarting replica %d and stopping replica %d", first, other))
	if err := cp.WaitAPIServiceAvailable(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("proxy routes: %v", cp.ProxyRoutes())

	// Stop leaves nothing running: no process mentions Dir, and nothing listens on the ports.
	stopStart = time.Now()
	cp.Stop()
	t.Logf("Stop took %s", time.Since(stopStart).Round(time.Millisecond))
	if cp.CertapiRunning() {
		t.Fatal("a certapi replica is running after Stop")
	}
	if procs := processesMentioning(t, cp.Dir); len(procs) > 0 {
		t.Fatalf("processes still running after Stop: %v", procs)
	}
	for port := range ports {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, time.Second); err == nil {
			c.Close()
			t.Errorf("port %s still accepts connections after Stop", port)
		}
	}
}

// TestEtcdCluster starts a 3-member etcd cluster under kube-apiserver: kube-apiserver keeps serving
// with one member stopped and with the raft leader killed, and members rejoin when started again.
func TestEtcdCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := framework.StartT(t, framework.Options{SkipCertapi: true, EtcdMembers: 3})
	if cp.EtcdMembers() != 3 || len(cp.EtcdEndpoints) != 3 || cp.EtcdMemberName(2) != "etcd-2" {
		t.Fatalf("members %d, endpoints %v, name of member 2 %q", cp.EtcdMembers(), cp.EtcdEndpoints, cp.EtcdMemberName(2))
	}
	admin, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			return err == nil || apierrors.IsAlreadyExists(err), nil
		}); err != nil {
			t.Fatalf("creating namespace %s: %v", name, err)
		}
	}
	leader, err := cp.EtcdLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.KillEtcdMember(leader); err != nil {
		t.Fatal(err)
	}
	if cp.EtcdMemberRunning(leader) {
		t.Fatalf("etcd member %d runs after KillEtcdMember", leader)
	}
	write("leader-killed")
	other := (leader + 1) % 3
	if err := cp.StopEtcdMember(other); err != nil {
		t.Fatal(err)
	}
	if err := cp.StartEtcd(ctx); err != nil { // both back, on their data
		t.Fatal(err)
	}
	write("all-back")
	if _, err := cp.EtcdLeader(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := cp.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	members, err := c.MemberList(ctx)
	if err != nil || len(members.Members) != 3 {
		t.Fatalf("member list: %v, %v", members, err)
	}
}

// TestReplicaOptions checks the option combinations Start refuses before starting anything.
func TestReplicaOptions(t *testing.T) {
	ctx := context.Background()
	for name, opts := range map[string]framework.Options{
		"embedded etcd with replicas": {Dir: t.TempDir(), CertapiReplicas: 2, CertapiEmbeddedEtcd: true},
		"negative replicas":           {Dir: t.TempDir(), CertapiReplicas: -1},
		"six etcd members":            {Dir: t.TempDir(), EtcdMembers: 6},
	} {
		cp, err := framework.Start(ctx, opts)
		if err == nil {
			cp.Stop()
			t.Errorf("%s: Start succeeded", name)
		}
	}
}

// certapiHasFlag reports whether the certapi binary the framework runs has --flag.
func certapiHasFlag(t *testing.T, flag string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := framework.CertapiBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := exec.CommandContext(ctx, bin, "--help").CombinedOutput() // --help may exit non-zero
	return bytes.Contains(out, []byte("--"+flag+" "))
}

func logContains(t *testing.T, path, s string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(data, []byte(s))
}

// processesMentioning lists the running processes with an argument that contains s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Log("no /proc: not checking for leftover processes")
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue // gone meanwhile, or not ours
		}
		found = append(found, fmt.Sprintf("%d: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
	}
	return found
}
