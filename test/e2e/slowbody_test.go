package e2e

import (
	"bufio"
	"context"
	"crypto/elliptic"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// Issue #9, hole 2: a client that is neither authenticated nor authorized must not make certapi buffer
// its request body, nor hold its connection for long.
const (
	slowConns      = 2000
	slowBodyLength = 64 << 10 // declared: the servingcerts limit
	slowBodySent   = 32 << 10 // sent: half of it, then nothing more
	// The issue's bounds.
	slowRSSBound      = 50 << 20
	slowIssuanceBound = time.Second
)

// TestUnauthenticatedSlowBodiesCostLittle opens 2,000 TLS connections straight to certapi, each with an
// unauthenticated servingcerts POST that declares a 64 KiB body and sends half of it, and holds them. Once
// certapi has taken in every byte sent, its resident memory must have grown by less than 50 MiB, and an
// authorized issuance through kube-apiserver must still complete in under a second.
func TestUnauthenticatedSlowBodiesCostLittle(t *testing.T) {
	raiseFileLimit(t, slowConns+1000)
	own := framework.StartT(t, framework.Options{})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	if _, err := c.CertapiV1alpha1().ServingCertRequests(ns).Create(context.Background(), e2etest.Request("slow", "slow"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grantServingCerts(t, kube, ns, "issuer", "slow")
	issuer, _ := testhelpers.Clients(t, serviceAccountConfigOn(t, own, kube, ns, "issuer"))
	body := e2etest.ServingCert(signertest.CSRPEM(t, signertest.ECKey(t, elliptic.P256())), nil)
	issueOnce := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		_, err := issuer.CertapiV1alpha1().ServingCertRequests(ns).CreateServingCert(ctx, "slow", body, metav1.CreateOptions{})
		return time.Since(start), err
	}
	// Setup only: wait until the Role has reached kube-apiserver's RBAC and certapi's leader signs.
	e2etest.Eventually(t, 60*time.Second, "the issuer ServiceAccount to get a certificate", func(context.Context) (bool, error) {
		_, err := issueOnce()
		return err == nil, nil
	})
	for range 20 { // warm: connections, caches, the leader's hand-off path
		if _, err := issueOnce(); err != nil {
			t.Fatal(err)
		}
	}

	pid := own.ReplicaPID(0)
	before := rssOf(t, pid)
	t.Logf("certapi (pid %d) resident before: %s", pid, mib(before))

	// The attack: TLS to certapi's port, no client certificate, no token.
	path := fmt.Sprintf("/apis/certapi.dev/v1alpha1/namespaces/%s/servingcertrequests/slow/servingcerts", ns)
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: certapi\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, slowBodyLength)
	half := `{"apiVersion":"certapi.dev/v1alpha1","kind":"ServingCert","spec":{"certificateRequest":"` + strings.Repeat("A", slowBodySent)
	half = half[:slowBodySent]
	conns := make([]net.Conn, slowConns)
	ports := make(map[int]bool, slowConns)
	var mu sync.Mutex
	var cutShort int // connections certapi closed while the client was still sending
	var wg sync.WaitGroup
	errs := make(chan error, slowConns)
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := &net.Dialer{Timeout: 30 * time.Second}
			for i := range next {
				conn, err := tls.DialWithDialer(d, "tcp", fmt.Sprintf("127.0.0.1:%d", own.CertapiPort), &tls.Config{
					InsecureSkipVerify: true, // the attacker does not care who answers
					NextProtos:         []string{"http/1.1"},
				})
				if err != nil {
					errs <- fmt.Errorf("connection %d: %w", i, err)
					continue
				}
				mu.Lock()
				conns[i] = conn
				ports[conn.LocalAddr().(*net.TCPAddr).Port] = true
				mu.Unlock()
				if _, err := conn.Write([]byte(head + half)); err != nil {
					// certapi answered and closed before the client was done sending: what it should
					// do to such a client.
					mu.Lock()
					cutShort++
					mu.Unlock()
				}
			}
		}()
	}
	for i := range slowConns {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	var failed []string
	for err := range errs {
		failed = append(failed, err.Error())
	}
	if len(failed) > 0 {
		t.Fatalf("%d of %d connections could not be made: %s", len(failed), slowConns, strings.Join(failed[:min(5, len(failed))], "; "))
	}

	// Wait until certapi has read everything the clients sent: no byte waits in a receive queue of its
	// end of these connections (an ended connection has nothing left there either).
	e2etest.Eventually(t, 2*time.Minute, "certapi to take in every byte sent", func(context.Context) (bool, error) {
		waiting, err := bytesWaiting(own.CertapiPort, ports)
		if err != nil {
			return false, err
		}
		return waiting == 0, nil
	})
	held := rssOf(t, pid)
	var took []time.Duration
	for range 5 {
		d, err := issueOnce()
		if err != nil {
			t.Fatalf("an authorized issuance through kube-apiserver failed while the connections were held: %v", err)
		}
		took = append(took, d.Round(time.Millisecond))
	}
	after := rssOf(t, pid)
	open, err := openServerConns(own.CertapiPort, ports)
	if err != nil {
		t.Fatal(err)
	}
	grew := max(held, after) - before
	t.Logf("%d unauthenticated half-sent bodies (%d of %d bytes each; %d cut short by certapi): resident %s -> %s held -> %s after 5 issuances; grew %s (%d bytes a connection); %d still open on certapi's side; authorized issuances took %v",
		slowConns, slowBodySent, slowBodyLength, cutShort, mib(before), mib(held), mib(after), mib(grew), grew/slowConns, open, took)
	if grew >= slowRSSBound {
		t.Errorf("certapi's resident memory grew by %s with %d unauthenticated connections; want less than %s", mib(grew), slowConns, mib(slowRSSBound))
	}
	for _, d := range took {
		if d >= slowIssuanceBound {
			t.Errorf("an authorized issuance took %s while the connections were held; want under %s", d, slowIssuanceBound)
		}
	}
}

// raiseFileLimit raises this process's soft limit on open files to at least need (certapi, started
// afterwards, inherits it), or fails the test when the hard limit is lower.
func raiseFileLimit(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= need {
		return
	}
	if lim.Max < need {
		t.Fatalf("the hard limit on open files is %d; this test needs %d (raise it with ulimit -Hn)", lim.Max, need)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("raising the soft limit on open files to %d: %v", lim.Cur, err)
	}
}

// rssOf returns a process's resident set size in bytes.
func rssOf(t *testing.T, pid int) int64 {
	t.Helper()
	if pid == 0 {
		t.Fatal("certapi is not running")
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// tcpSocket is one line of /proc/net/tcp: the server's end of a connection to port.
type tcpSocket struct {
	remotePort int
	state      string // hex, 01 is ESTABLISHED
	rxQueue    int64
}

// serverSockets returns the sockets whose local port is port and whose remote port is in remotes.
func serverSockets(port int, remotes map[int]bool) ([]tcpSocket, error) {
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return nil, err
	}
	var out []tcpSocket
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		local, remote := hexPort(f[1]), hexPort(f[2])
		if local != port || !remotes[remote] {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseInt(rx, 16, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/net/tcp: %q: %w", line, err)
		}
		out = append(out, tcpSocket{remotePort: remote, state: f[3], rxQueue: n})
	}
	return out, nil
}

func hexPort(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.ParseInt(p, 16, 32)
	return int(n)
}

// bytesWaiting sums what waits unread in the receive queues of the server's ends of the connections.
func bytesWaiting(port int, remotes map[int]bool) (int64, error) {
	socks, err := serverSockets(port, remotes)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, s := range socks {
		n += s.rxQueue
	}
	return n, nil
}

// openServerConns counts the server's ends of the connections that are still established.
func openServerConns(port int, remotes map[int]bool) (int, error) {
	socks, err := serverSockets(port, remotes)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, s := range socks {
		if s.state == "01" {
			n++
		}
	}
	return n, nil
}
