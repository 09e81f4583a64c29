package issuer_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/utils/clock"

	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
	"github.com/certapi/certapi/test/framework"
)

// These tests run the issuer against a real etcd, the one `make tools` builds into _output/bin (or
// $ETCD_BIN), through the package's exported API only.

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
	bin, err := framework.EtcdBinary()
	if err != nil {
		return nil, err
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
	*issuer.Issuer
	cancel context.CancelFunc
	done   chan struct{}
}

func (r *running) stop() {
	r.cancel()
	<-r.done
}

func startIssuer(t *testing.T, prefix, identity string) *running {
	t.Helper()
	return startIssuerWith(t, issuer.Config{Prefix: prefix, Identity: identity})
}

// startIssuerWith runs an issuer with cfg, filling in the client, short timeouts and the cluster domain.
func startIssuerWith(t *testing.T, cfg issuer.Config) *running {
	t.Helper()
	cfg.Client = newClient(t)
	cfg.SessionTTL, cfg.HandoffTimeout, cfg.ClusterDomain = 2*time.Second, 2*time.Second, "cluster.local"
	iss, err := issuer.New(cfg)
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

// storedEntry is one CA entry of the stored record, in its stored form.
type storedEntry struct {
	Role           string `json:"role"`
	CertificatePEM string `json:"certificatePEM"`
	KeyPEM         string `json:"keyPEM,omitempty"`
	Until          string `json:"until,omitempty"`
}

// rawRecord returns the stored CA record's value as it is in etcd.
func rawRecord(t *testing.T, prefix string) []byte {
	t.Helper()
	resp, err := newClient(t).Get(context.Background(), prefix+"/"+issuer.CAKeysResource+"/default")
	if err != nil {
		t.Fatalf("loading the CA record: %v", err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatal("loading the CA record: not found")
	}
	return resp.Kvs[0].Value
}

// storedEntries decodes the stored record's CA entries; no encryption is configured, so it is JSON.
func storedEntries(t *testing.T, prefix string) []storedEntry {
	t.Helper()
	var rec struct {
		Authorities []storedEntry `json:"authorities"`
	}
	if err := json.Unmarshal(rawRecord(t, prefix), &rec); err != nil {
		t.Fatalf("decoding the CA record: %v", err)
	}
	return rec.Authorities
}

// storedCAs returns every CA in the stored record: Active, then Next, then the Retiring ones. No
// encryption is configured here, so the record is stored as JSON; it is read in the stored form, which
// a later certapi must still load. Each Active and Next entry must load as a CA with its key; a Retiring
// entry, which no longer signs, must hold its certificate and no key.
func storedCAs(t *testing.T, prefix string) []*signer.CA {
	t.Helper()
	byRole := map[string][]*signer.CA{}
	for n, e := range storedEntries(t, prefix) {
		var ca *signer.CA
		var err error
		switch e.Role {
		case issuer.RoleActive, issuer.RoleNext:
			ca, err = signer.LoadCA([]byte(e.CertificatePEM), []byte(e.KeyPEM))
		case issuer.RoleRetiring:
			if e.KeyPEM != "" {
				t.Fatalf("CA %d of the stored record is Retiring and still has its private key", n)
			}
			ca, err = signer.LoadCACertificate([]byte(e.CertificatePEM))
		default:
			t.Fatalf("CA %d of the stored record has unknown role %q", n, e.Role)
		}
		if err != nil {
			t.Fatalf("loading CA %d of the stored record: %v", n, err)
		}
		byRole[e.Role] = append(byRole[e.Role], ca)
	}
	if len(byRole[issuer.RoleActive]) != 1 || len(byRole[issuer.RoleNext]) > 1 {
		t.Fatalf("the stored CA record has %d Active and %d Next CAs, want 1 and at most 1", len(byRole[issuer.RoleActive]), len(byRole[issuer.RoleNext]))
	}
	return append(append(byRole[issuer.RoleActive], byRole[issuer.RoleNext]...), byRole[issuer.RoleRetiring]...)
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

// storedRequests is a HandoffCheck over requests a test declares stored, as the registry's check is over
// the stored ServingCertRequests.
func storedRequests(stored ...issuer.Request) issuer.HandoffCheck {
	return func(_ context.Context, req issuer.Request) error {
		for _, s := range stored {
			if s.Namespace == req.Namespace && s.Name == req.Name {
				return req.AllowedBy(s)
			}
		}
		return fmt.Errorf("%w: ServingCertRequest %s/%s does not exist", issuer.ErrHandoffRefused, req.Namespace, req.Name)
	}
}

// TestFollowerHandsOffToTheLeader: a follower's request is signed by the leader when the leader's check
// finds it allowed by what is stored, and refused with ErrHandoffRefused otherwise, with nothing signed;
// a leader without a check refuses every handoff. No key is left behind per issuance.
func TestFollowerHandsOffToTheLeader(t *testing.T) {
	stored := issuer.Request{Namespace: "ns", Name: "r", ServiceName: "svc", DNSNames: []string{"x.ns.svc"}, Duration: 2 * time.Hour, Path: issuer.PathServingCerts}
	asked := func(change func(*issuer.Request)) issuer.Request {
		r := stored
		r.Duration, r.PublicKeyPKIX = time.Hour, csrKey(t)
		change(&r)
		return r
	}
	for _, tc := range []struct {
		name    string
		check   issuer.HandoffCheck
		req     issuer.Request
		refused bool
	}{
		{name: "allowed by the stored request", check: storedRequests(stored), req: asked(func(*issuer.Request) {})},
		{name: "another Service than the stored request's", check: storedRequests(stored), req: asked(func(r *issuer.Request) { r.ServiceName = "kubernetes" }), refused: true},
		{name: "a DNS name the stored request does not list", check: storedRequests(stored), req: asked(func(r *issuer.Request) { r.DNSNames = append(r.DNSNames, "y.ns.svc") }), refused: true},
		{name: "no stored request", check: storedRequests(stored), req: asked(func(r *issuer.Request) { r.Name = "forged" }), refused: true},
		{name: "a leader without a check", req: asked(func(*issuer.Request) {}), refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("/test/handoff-%d", time.Now().UnixNano())
			var signed atomic.Int32
			a := startIssuerWith(t, issuer.Config{Prefix: prefix, Identity: "a", CheckHandoff: tc.check, OnIssued: func(issuer.Request, *issuer.Result) { signed.Add(1) }})
			leader := waitLeader(t, a)
			b := startIssuer(t, prefix, "b")
			if b.Leading() {
				t.Fatal("b leads while a does")
			}
			res, err := b.Issue(context.Background(), tc.req)
			if tc.refused {
				if !errors.Is(err, issuer.ErrHandoffRefused) || res != nil {
					t.Fatalf("got %v (certificate: %v), want ErrHandoffRefused and no certificate", err, res != nil)
				}
				if n := signed.Load(); n != 0 {
					t.Fatalf("the leader signed %d certificates for a refused request", n)
				}
			} else {
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
			}
			// Nothing is left behind per issuance.
			resp, err := newClient(t).Get(context.Background(), prefix+"/handoff/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil || resp.Count != 0 {
				t.Fatalf("handoff keys left: %d (%v)", resp.Count, err)
			}
		})
	}
}

// TestLeaderNamesTheElectedReplica: every replica, leader or not, names the leader from the election,
// and none once every replica has stopped.
func TestLeaderNamesTheElectedReplica(t *testing.T) {
	ctx := context.Background()
	prefix := fmt.Sprintf("/test/leader-%d", time.Now().UnixNano())
	idle, err := issuer.New(issuer.Config{Client: newClient(t), Prefix: prefix, Identity: "observer"})
	if err != nil {
		t.Fatal(err)
	}
	if id, ok, err := idle.Leader(ctx); err != nil || ok {
		t.Fatalf("before any replica runs: Leader() = %q, %v, %v; want none", id, ok, err)
	}
	a := startIssuer(t, prefix, "a")
	waitLeader(t, a)
	b := startIssuer(t, prefix, "b")
	for _, r := range []*issuer.Issuer{a.Issuer, b.Issuer, idle} {
		if id, ok, err := r.Leader(ctx); err != nil || !ok || id != "a" {
			t.Fatalf("with a leading: Leader() = %q, %v, %v; want a", id, ok, err)
		}
	}
	a.stop() // resigns: b takes over at once
	waitLeader(t, b)
	if id, ok, err := idle.Leader(ctx); err != nil || !ok || id != "b" {
		t.Fatalf("after a resigned: Leader() = %q, %v, %v; want b", id, ok, err)
	}
	b.stop()
	if id, ok, err := idle.Leader(ctx); err != nil || ok {
		t.Fatalf("after every replica stopped: Leader() = %q, %v, %v; want none", id, ok, err)
	}
}

func TestNoLeaderMeansErrNoLeaderWithinTheDeadline(t *testing.T) {
	iss, err := issuer.New(issuer.Config{Client: newClient(t), Prefix: fmt.Sprintf("/test/noleader-%d", time.Now().UnixNano()), Identity: "lonely", HandoffTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = iss.Issue(context.Background(), issuer.Request{Namespace: "ns", Name: "r", ServiceName: "svc", Duration: time.Hour, PublicKeyPKIX: csrKey(t)})
	if !errors.Is(err, issuer.ErrNoLeader) {
		t.Fatalf("got %v, want ErrNoLeader", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %s, want about the 500ms handoff timeout", took)
	}
}

// pausingClock is the real clock, except that the first Now after pauseOnce(f) runs f before it
// returns: the goroutine that reads the clock is held up there for as long as f takes, as if it had
// paused.
type pausingClock struct {
	clock.RealClock
	mu    sync.Mutex
	pause func()
}

func (c *pausingClock) pauseOnce(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pause = f
}

func (c *pausingClock) Now() time.Time {
	c.mu.Lock()
	f := c.pause
	c.pause = nil
	c.mu.Unlock()
	if f != nil {
		f()
	}
	return c.RealClock.Now()
}

// TestFencing revokes the leader's session as if it had paused: it must stop signing at once, and a CA
// write under its old term must be refused even though it still holds the CA in memory.
//
// The pause falls inside Rotate, between its check that this replica leads and its write of the next
// step: Rotate reads the clock in between, and the clock revokes the session there. Rotate then writes
// under the term it read before the pause, from the CA state it holds in memory, which is the write
// that fencing must refuse.
func TestFencing(t *testing.T) {
	prefix := fmt.Sprintf("/test/fencing-%d", time.Now().UnixNano())
	// The replica re-campaigns at once after losing its session and, alone, wins again within
	// milliseconds: record the transition rather than poll for it.
	// At the moment leadership is lost, Signing must already refuse.
	lost := make(chan bool, 1)
	clk := &pausingClock{}
	var a *running
	a = startIssuerWith(t, issuer.Config{Prefix: prefix, Identity: "a", Clock: clk, OnLeadershipChange: func(leading bool) {
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

	// The term's election key is the one key under <prefix>/leader/ (a is the only candidate); its
	// lease is a's session.
	client := newClient(t)
	resp, err := client.Get(context.Background(), prefix+"/leader/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("election keys under %s/leader/: %v", prefix, err)
	}
	key, session := string(resp.Kvs[0].Key), clientv3.LeaseID(resp.Kvs[0].Lease)
	var revoked atomic.Bool
	clk.pauseOnce(func() {
		if _, err := client.Revoke(context.Background(), session); err != nil {
			t.Errorf("revoking the session of election key %s: %v", key, err)
			return
		}
		revoked.Store(true)
	})
	pol := signer.RotationPolicy{Grace: 0, MaxCertificateDuration: time.Hour}
	steps, err := a.Rotate(context.Background(), issuer.RotationRequest{ForceRotation: "1", CADuration: 48 * time.Hour, Policy: pol})
	if !revoked.Load() {
		t.Fatal("Rotate did not read the clock between its leadership check and its write, or the revocation failed")
	}
	if !errors.Is(err, issuer.ErrFenced) || len(steps) != 0 {
		t.Fatalf("CA write under the revoked term: steps %v, %v; want none, ErrFenced", steps, err)
	}
	select {
	case stillSigns := <-lost:
		if stillSigns {
			t.Fatal("the deposed leader could still sign when it lost its session")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deposed leader did not stop leading after its session was revoked")
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
	steps, err := a.Rotate(context.Background(), issuer.RotationRequest{ForceRotation: "1", CADuration: 48 * time.Hour, Policy: pol})
	if err != nil || len(steps) != 1 || steps[0] != signer.StepPublishNext {
		t.Fatalf("steps %v, %v", steps, err)
	}
	if len(storedCAs(t, prefix)) != 2 {
		t.Fatal("Next was not stored")
	}
	steps, err = a.Rotate(context.Background(), issuer.RotationRequest{ForceRotation: "1", NextEverywhere: true, CADuration: 48 * time.Hour, Policy: pol})
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

// keysByRole counts the private keys the stored record holds, by role.
func keysByRole(t *testing.T, prefix string) map[string]int {
	t.Helper()
	keys := map[string]int{}
	for _, e := range storedEntries(t, prefix) {
		if e.KeyPEM != "" {
			keys[e.Role]++
		}
	}
	return keys
}

// TestRecordHoldsOnlySigningKeys: in real etcd, after a rotation and after a distrust, the CA record holds
// the private keys of the Active CA and of a Next CA only: a CA that no longer signs has its certificate
// there and nothing else.
func TestRecordHoldsOnlySigningKeys(t *testing.T) {
	ctx := context.Background()
	prefix := fmt.Sprintf("/test/keys-%d", time.Now().UnixNano())
	a := startIssuer(t, prefix, "a")
	waitLeader(t, a)
	pol := signer.RotationPolicy{Grace: 0, MaxCertificateDuration: time.Hour, DistrustDwell: time.Hour}
	req := issuer.RotationRequest{ForceRotation: "1", CADuration: 48 * time.Hour, Policy: pol}
	for _, tc := range []struct {
		name     string
		req      func(r issuer.RotationRequest) issuer.RotationRequest
		want     signer.RotationStep
		wantKeys map[string]int
		wantCAs  int
	}{
		{"Next published", func(r issuer.RotationRequest) issuer.RotationRequest { return r }, signer.StepPublishNext,
			map[string]int{issuer.RoleActive: 1, issuer.RoleNext: 1}, 2},
		{"switched: the old Active CA is Retiring", func(r issuer.RotationRequest) issuer.RotationRequest { r.NextEverywhere = true; return r }, signer.StepSwitch,
			map[string]int{issuer.RoleActive: 1}, 2},
		{"Next published again", func(r issuer.RotationRequest) issuer.RotationRequest { r.ForceRotation = "2"; return r }, signer.StepPublishNext,
			map[string]int{issuer.RoleActive: 1, issuer.RoleNext: 1}, 3},
		{"distrusted: Active, Next and Retiring all distrusted", func(r issuer.RotationRequest) issuer.RotationRequest {
			r.ForceRotation, r.Distrust = "2", "leak"
			return r
		}, signer.StepDistrust, map[string]int{issuer.RoleActive: 1}, 4},
	} {
		steps, err := a.Rotate(ctx, tc.req(req))
		if err != nil || len(steps) != 1 || steps[0] != tc.want {
			t.Fatalf("%s: steps %v, %v; want %s", tc.name, steps, err, tc.want)
		}
		cas := storedCAs(t, prefix) // fails on a Retiring entry with a key
		if len(cas) != tc.wantCAs {
			t.Errorf("%s: %d CAs stored; want %d", tc.name, len(cas), tc.wantCAs)
		}
		if got := keysByRole(t, prefix); !maps.Equal(got, tc.wantKeys) {
			t.Errorf("%s: keys stored by role %v; want %v", tc.name, got, tc.wantKeys)
		}
	}
	st, _ := a.State()
	for _, r := range st.Retiring {
		if !r.Distrusted || r.CA.Key != nil {
			t.Errorf("after the distrust, Retiring CA %s: distrusted %v, key in memory %v; want distrusted, no key",
				signer.FormatSerialNumber(r.CA.Certificate.SerialNumber), r.Distrusted, r.CA.Key != nil)
		}
	}
}

// TestOldRecordIsRewrittenWithoutRetiringKeys: a record written by an older certapi, whose Retiring
// entry still has its private key, is rewritten without it by the next leader.
func TestOldRecordIsRewrittenWithoutRetiringKeys(t *testing.T) {
	prefix := fmt.Sprintf("/test/migrate-%d", time.Now().UnixNano())
	now := time.Now()
	mk := func() storedEntry {
		ca := signertest.NewCA(t, now, 48*time.Hour)
		key, err := ca.KeyPEM()
		if err != nil {
			t.Fatal(err)
		}
		return storedEntry{CertificatePEM: string(ca.CertificatePEM()), KeyPEM: string(key)}
	}
	active, retiring := mk(), mk()
	active.Role, retiring.Role, retiring.Until = issuer.RoleActive, issuer.RoleRetiring, now.Add(time.Hour).UTC().Format(time.RFC3339)
	old, err := json.Marshal(map[string]any{"apiVersion": "certapi.dev/internal", "kind": "CertificateAuthorityKeys",
		"authorities": []storedEntry{active, retiring}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t).Put(context.Background(), prefix+"/"+issuer.CAKeysResource+"/default", string(old)); err != nil {
		t.Fatal(err)
	}
	a := startIssuer(t, prefix, "a")
	waitLeader(t, a)
	if got := keysByRole(t, prefix); !maps.Equal(got, map[string]int{issuer.RoleActive: 1}) {
		t.Fatalf("keys stored by role after the leader loaded an old record: %v; want the Active CA's only", got)
	}
	if cas := storedCAs(t, prefix); len(cas) != 2 || cas[0].Certificate.Raw == nil {
		t.Fatalf("%d CAs stored after the rewrite; want the Active and the Retiring one", len(cas))
	}
	if st, _ := a.State(); len(st.Retiring) != 1 || st.Retiring[0].CA.Key != nil {
		t.Fatal("the leader holds the Retiring CA's key in memory")
	}
}

// prefixTransformer stands in for an encrypting provider with identity as a fallback, as an
// EncryptionConfiguration that lists a key before identity is: it writes "enc:" before the data, and
// reads data without it as stale (stored before encryption was configured).
type prefixTransformer struct{}

const encPrefix = "k8s:enc:test:"

func (prefixTransformer) TransformFromStorage(_ context.Context, data []byte, _ value.Context) ([]byte, bool, error) {
	if rest, ok := bytes.CutPrefix(data, []byte(encPrefix)); ok {
		return rest, false, nil
	}
	return data, true, nil
}

func (prefixTransformer) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	return append([]byte(encPrefix), data...), nil
}

// TestStaleRecordIsRewritten: a record stored unencrypted, read by a leader with encryption configured
// now (the transformer calls it stale), is rewritten encrypted at once, with the same CA.
func TestStaleRecordIsRewritten(t *testing.T) {
	prefix := fmt.Sprintf("/test/stale-%d", time.Now().UnixNano())
	plain := startIssuer(t, prefix, "plain")
	waitLeader(t, plain)
	first := activeSerial(plain)
	plain.stop()
	if raw := rawRecord(t, prefix); bytes.HasPrefix(raw, []byte(encPrefix)) {
		t.Fatal("the record was encrypted before encryption was configured")
	}
	enc := startIssuerWith(t, issuer.Config{Prefix: prefix, Identity: "encrypting", Transformer: prefixTransformer{}})
	waitLeader(t, enc)
	if got := activeSerial(enc); got != first {
		t.Fatalf("the encrypting leader signs with %s; want the stored CA %s", got, first)
	}
	if raw := rawRecord(t, prefix); !bytes.HasPrefix(raw, []byte(encPrefix)) {
		t.Fatalf("the stale record was not rewritten: it starts %q", raw[:min(len(raw), 16)])
	}
}
