package issuer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/certapi/certapi/pkg/signer"
)

// These tests run the issuer against a real etcd, the one `make tools` builds into _output/bin.

var etcdEndpoint string

func TestMain(m *testing.M) {
	stop, err := startEtcd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startEtcd() (func(), error) {
	bin, err := filepath.Abs(filepath.Join("..", "..", "_output", "bin", "etcd"))
	if err != nil {
		return nil, err
	}
	if p := os.Getenv("ETCD_BIN"); p != "" {
		bin = p
	}
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no etcd at %s: run `make tools`", bin)
	}
	dir, err := os.MkdirTemp("", "issuer-etcd-")
	if err != nil {
		return nil, err
	}
	client, peer := freePort(), freePort()
	etcdEndpoint = fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	cmd := exec.Command(bin, "--data-dir", dir, "--listen-client-urls", etcdEndpoint, "--advertise-client-urls", etcdEndpoint,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "default="+peerURL,
		"--unsafe-no-fsync", "--log-level", "error")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	stop := func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = os.RemoveAll(dir)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdEndpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		stop()
		return nil, err
	}
	defer c.Close()
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := c.Get(ctx, "health")
		return err == nil, nil
	})
	if err != nil {
		stop()
		return nil, fmt.Errorf("etcd did not start: %w", err)
	}
	return stop, nil
}

func newClient(t *testing.T) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdEndpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// running is an issuer whose Run goroutine the test owns.
type running struct {
	*Issuer
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

func startIssuer(t *testing.T, prefix, identity string) *running {
	t.Helper()
	return startIssuerWith(t, Config{Prefix: prefix, Identity: identity})
}

// startIssuerWith runs an issuer with cfg, filling in the client, short timeouts and the cluster domain.
func startIssuerWith(t *testing.T, cfg Config) *running {
	t.Helper()
	cfg.Client = newClient(t)
	cfg.SessionTTL, cfg.HandoffTimeout, cfg.ClusterDomain = 2*time.Second, 2*time.Second, "cluster.local"
	iss, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Issuer: iss, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		_ = iss.Run(ctx)
	}()
	t.Cleanup(r.stop)
	return r
}

func waitLeader(t *testing.T, issuers ...*running) *running {
	t.Helper()
	var leader *running
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		n := 0
		for _, r := range issuers {
			if r.Leading() {
				leader, n = r, n+1
			}
		}
		if n > 1 {
			return false, errors.New("two issuers lead at once")
		}
		return n == 1, nil
	})
	if err != nil {
		t.Fatalf("waiting for one leader: %v", err)
	}
	return leader
}

func activeSerial(r *running) string {
	ca, _, ok := r.Signing()
	if !ok {
		return ""
	}
	return signer.FormatSerialNumber(ca.Certificate.SerialNumber)
}

// storedCAs returns every CA in the stored record.
func storedCAs(t *testing.T, prefix string) []*signer.CA {
	t.Helper()
	ks := &keystore{client: newClient(t), key: prefix + "/" + CAKeysResource + "/default", transformer: identityTransformer{}}
	auth, _, found, err := ks.load(context.Background())
	if err != nil || !found {
		t.Fatalf("loading the CA record: found %v, %v", found, err)
	}
	cas := []*signer.CA{auth.Active}
	if auth.Next != nil {
		cas = append(cas, auth.Next)
	}
	for _, r := range auth.Retiring {
		cas = append(cas, r.CA)
	}
	return cas
}

func TestColdStartYieldsExactlyOneCA(t *testing.T) {
	for round := 0; round < 5; round++ {
		t.Run(fmt.Sprintf("round %d", round), func(t *testing.T) {
			prefix := fmt.Sprintf("/test/coldstart-%d-%d", round, time.Now().UnixNano())
			var issuers []*running
			var mu sync.Mutex
			var wg sync.WaitGroup
			for i := 0; i < 3; i++ {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					r := startIssuer(t, prefix, fmt.Sprintf("replica-%d", i))
					mu.Lock()
					issuers = append(issuers, r)
					mu.Unlock()
				}(i)
			}
			wg.Wait()
			leader := waitLeader(t, issuers...)
			first := activeSerial(leader)
			if cas := storedCAs(t, prefix); len(cas) != 1 || signer.FormatSerialNumber(cas[0].Certificate.SerialNumber) != first {
				t.Fatalf("stored CAs: %d, want exactly the leader's %s", len(cas), first)
			}
			// Hand over twice; every leader signs with the same CA.
			for hand := 0; hand < 2; hand++ {
				leader.stop()
				var rest []*running
				for _, r := range issuers {
					if r != leader {
						rest = append(rest, r)
					}
				}
				issuers = rest
				leader = waitLeader(t, issuers...)
				if got := activeSerial(leader); got != first {
					t.Fatalf("new leader signs with CA %s, want %s", got, first)
				}
			}
			if cas := storedCAs(t, prefix); len(cas) != 1 {
				t.Fatalf("stored CAs after handovers: %d, want 1", len(cas))
			}
		})
	}
}

func csrKey(t *testing.T) []byte {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestFollowerHandsOffToTheLeader(t *testing.T) {
	prefix := fmt.Sprintf("/test/handoff-%d", time.Now().UnixNano())
	a := startIssuer(t, prefix, "a")
	leader := waitLeader(t, a)
	b := startIssuer(t, prefix, "b")
	if b.Leading() {
		t.Fatal("b leads while a does")
	}
	res, err := b.Issue(context.Background(), Request{Namespace: "ns", Name: "r", ServiceName: "svc", Duration: time.Hour, PublicKeyPKIX: csrKey(t)})
	if err != nil {
		t.Fatalf("issue through the follower: %v", err)
	}
	block, _ := pem.Decode([]byte(res.CertificatePEM))
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	ca, _, _ := leader.Signing()
	if err := leaf.CheckSignatureFrom(ca.Certificate); err != nil {
		t.Fatalf("not signed by the leader's CA: %v", err)
	}
	// Nothing is left behind per issuance.
	resp, err := newClient(t).Get(context.Background(), prefix+"/handoff/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("handoff keys left: %d (%v)", resp.Count, err)
	}
}

func TestNoLeaderMeansErrNoLeaderWithinTheDeadline(t *testing.T) {
	iss, err := New(Config{Client: newClient(t), Prefix: fmt.Sprintf("/test/noleader-%d", time.Now().UnixNano()), Identity: "lonely", HandoffTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = iss.Issue(context.Background(), Request{Namespace: "ns", Name: "r", ServiceName: "svc", Duration: time.Hour, PublicKeyPKIX: csrKey(t)})
	if !errors.Is(err, ErrNoLeader) {
		t.Fatalf("got %v, want ErrNoLeader", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %s, want about the 500ms handoff timeout", took)
	}
}

// TestFencing revokes the leader's session as if it had paused: it must stop signing at once, and a CA
// write under its old term must be refused even though it still holds the CA in memory.
func TestFencing(t *testing.T) {
	prefix := fmt.Sprintf("/test/fencing-%d", time.Now().UnixNano())
	// The replica re-campaigns at once after losing its session and, alone, wins again within
	// milliseconds: record the transition rather than poll for it.
	// At the moment leadership is lost, Signing must already refuse.
	lost := make(chan bool, 1)
	var a *running
	a = startIssuerWith(t, Config{Prefix: prefix, Identity: "a", OnLeadershipChange: func(leading bool) {
		if !leading {
			_, _, stillSigns := a.Signing()
			select {
			case lost <- stillSigns:
			default:
			}
		}
	}})
	waitLeader(t, a)
	ca, _, _ := a.Signing()
	a.mu.RLock()
	key, rev := a.termKey, a.termRev
	a.mu.RUnlock()

	client := newClient(t)
	resp, err := client.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("election key %s: %v", key, err)
	}
	if _, err := client.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	select {
	case stillSigns := <-lost:
		if stillSigns {
			t.Fatal("the deposed leader could still sign when it lost its session")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deposed leader did not stop leading after its session was revoked")
	}
	newCA, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	_, modRev, _, err := a.store.load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.store.save(context.Background(), signer.Authorities{Active: newCA}, modRev, key, rev); !errors.Is(err, ErrFenced) {
		t.Fatalf("CA write under the revoked term: %v, want ErrFenced", err)
	}
	// The CA is unchanged, and the replica leads again (new session, same CA) once it re-campaigns.
	if cas := storedCAs(t, prefix); len(cas) != 1 || !cas[0].Certificate.Equal(ca.Certificate) {
		t.Fatal("the stored CA changed")
	}
	waitLeader(t, a)
	if got, _, _ := a.Signing(); !got.Certificate.Equal(ca.Certificate) {
		t.Fatal("after re-election the replica signs with another CA")
	}
}

// TestRotateIsFencedAndPersisted forces a rotation through Rotate: each step is stored before it takes
// effect, and a successor loads the same state.
func TestRotateIsFencedAndPersisted(t *testing.T) {
	prefix := fmt.Sprintf("/test/rotate-%d", time.Now().UnixNano())
	a := startIssuer(t, prefix, "a")
	waitLeader(t, a)
	first := activeSerial(a)
	pol := signer.RotationPolicy{Grace: 0, MaxCertificateDuration: time.Hour}
	steps, err := a.Rotate(context.Background(), RotationRequest{ForceRotation: "1", CADuration: 48 * time.Hour, Policy: pol})
	if err != nil || len(steps) != 1 || steps[0] != signer.StepPublishNext {
		t.Fatalf("steps %v, %v", steps, err)
	}
	if len(storedCAs(t, prefix)) != 2 {
		t.Fatal("Next was not stored")
	}
	steps, err = a.Rotate(context.Background(), RotationRequest{ForceRotation: "1", NextEverywhere: true, CADuration: 48 * time.Hour, Policy: pol})
	if err != nil || len(steps) != 1 || steps[0] != signer.StepSwitch {
		t.Fatalf("steps %v, %v", steps, err)
	}
	if activeSerial(a) == first {
		t.Fatal("Active did not change")
	}
	_, bundle, _ := a.Signing()
	if certs, _ := signer.ParseBundle(bundle); len(certs) != 2 {
		t.Fatalf("bundle holds %d CAs, want Active and Retiring", len(certs))
	}
	// A successor sees the same Active and Retiring CAs.
	want := activeSerial(a)
	b := startIssuer(t, prefix, "b")
	a.stop()
	waitLeader(t, b)
	if got := activeSerial(b); got != want {
		t.Fatalf("successor signs with %s, want %s", got, want)
	}
	if st, _ := b.State(); len(st.Retiring) != 1 {
		t.Fatal("successor lost the Retiring CA")
	}
}
