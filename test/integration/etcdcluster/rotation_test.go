package etcdcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/test/testhelpers"
)

// memStore is the peer CA's store as the Secret is in a cluster: Replace changes it when it still holds
// the CA the caller started from, and every running member hears of each change (SetPeerCA), as every
// replica's watch of the Secret would tell it.
type memStore struct {
	w        *world
	mu       sync.Mutex
	st       etcdcluster.PeerCAState
	replaced int
	// publicOnly keeps the CA's public part only, as the Secret does when the members keep the key in
	// their etcd (custody_test.go).
	publicOnly bool
}

func newMemStore(w *world) *memStore {
	s := &memStore{w: w, st: etcdcluster.PeerCAState{CA: w.ca}}
	w.mu.Lock()
	w.store = s
	w.mu.Unlock()
	return s
}

func (s *memStore) state() etcdcluster.PeerCAState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.KeyInStore = st.CA.Key != nil
	return st
}

// Current is the CA the store holds.
func (s *memStore) Current(context.Context) (*etcdcluster.PeerCA, error) { return s.state().CA, nil }

// DropKey removes the key from the store, as incluster.PeerCASecret empties tls.key.
func (s *memStore) DropKey(_ context.Context, ca *etcdcluster.PeerCA, rotate string) error {
	s.mu.Lock()
	if !s.st.CA.Equal(ca) {
		s.mu.Unlock()
		return errors.New("the store no longer holds that CA")
	}
	public := *s.st.CA
	public.Key = nil
	s.st.CA = &public
	if rotate != "" {
		s.st.Requested = rotate
	}
	s.mu.Unlock()
	s.w.mu.Lock()
	s.w.ca = &public
	s.w.mu.Unlock()
	s.tellMembers()
	return nil
}

func (s *memStore) replacements() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.replaced
}

func (s *memStore) Replace(_ context.Context, cur, next *etcdcluster.PeerCA, handled string) error {
	s.mu.Lock()
	if !s.st.CA.Equal(cur) {
		s.mu.Unlock()
		return errors.New("the store no longer holds the CA the rotation started from")
	}
	if s.publicOnly {
		public := *next
		public.Key = nil
		next = &public
	}
	s.st.CA = next
	if handled != "" {
		s.st.Handled = handled
	}
	s.replaced++
	s.mu.Unlock()
	s.w.mu.Lock()
	s.w.ca = next
	s.w.mu.Unlock()
	s.tellMembers()
	return nil
}

// request asks for a rotation, as `kubectl certapi rotate --etcd-peer` does with the Secret's annotation.
func (s *memStore) request(value string) {
	s.mu.Lock()
	s.st.Requested = value
	s.mu.Unlock()
	s.tellMembers()
}

func (s *memStore) tellMembers() {
	st := s.state()
	s.w.mu.Lock()
	var members []*etcdcluster.Member
	for _, nd := range s.w.nodes {
		if nd.member != nil {
			members = append(members, nd.member)
		}
	}
	s.w.mu.Unlock()
	for _, m := range members {
		m.SetPeerCA(st)
	}
}

// presents returns the certificate nd presents on its client URL to a client that trusts roots.
func presents(nd *node, roots *x509.CertPool) (*x509.Certificate, error) {
	certFile, keyFile, caFile := nd.member.ClientTLSFiles()
	cfg, err := tlsClientConfig(certFile, keyFile, caFile)
	if err != nil {
		return nil, err
	}
	cfg.RootCAs = roots
	u, err := url.Parse(nd.clientURL)
	if err != nil {
		return nil, err
	}
	cfg.ServerName = u.Hostname()
	conn, err := tls.Dial("tcp", u.Host, cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0], nil
}

// load keeps writing and reading through clients made before the rotation (their trust is the old CA
// alone, as certapi's storage client loads it once at start) and through a new client every tenth
// operation (a fresh TLS handshake each), and counts every failure.
type load struct {
	ops, failures atomic.Int64
	mu            sync.Mutex
	firstErr      error
	stop          context.CancelFunc
	done          chan struct{}
}

func startLoad(t *testing.T, w *world) *load {
	t.Helper()
	var urls []string
	for _, nd := range w.nodes {
		urls = append(urls, nd.clientURL)
	}
	certFile, keyFile, caFile := w.nodes[0].member.ClientTLSFiles()
	tlsCfg, err := tlsClientConfig(certFile, keyFile, caFile)
	if err != nil {
		t.Fatal(err)
	}
	newClient := func() (*clientv3.Client, error) {
		return clientv3.New(clientv3.Config{Endpoints: urls, TLS: tlsCfg.Clone(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	}
	long, err := newClient()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{stop: cancel, done: make(chan struct{})}
	fail := func(err error) {
		l.failures.Add(1)
		l.mu.Lock()
		if l.firstErr == nil {
			l.firstErr = err
		}
		l.mu.Unlock()
	}
	go func() {
		defer close(l.done)
		defer func() { _ = long.Close() }()
		for i := 0; ctx.Err() == nil; i++ {
			c := long
			if i%10 == 9 {
				fresh, err := newClient()
				if err != nil {
					fail(fmt.Errorf("new client: %w", err))
					continue
				}
				c = fresh
			}
			octx, ocancel := context.WithTimeout(context.Background(), 10*time.Second)
			k := fmt.Sprintf("/load/%d", i%50)
			_, err := c.Put(octx, k, fmt.Sprint(i))
			if err == nil {
				_, err = c.Get(octx, k)
			}
			ocancel()
			if c != long {
				_ = c.Close()
			}
			if err != nil {
				fail(fmt.Errorf("operation %d: %w", i, err))
			}
			l.ops.Add(1)
			t := time.NewTimer(5 * time.Millisecond)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}()
	return l
}

func (l *load) finish() (ops, failures int64, first error) {
	l.stop()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ops.Load(), l.failures.Load(), l.firstErr
}

// TestPeerCARotation: asked for, the etcd leader rotates the peer CA with no restart and no failed etcd
// request: the new CA is trusted with the old one, every member re-issues its certificate from it (with
// the chain that lets processes still trusting the old CA alone verify it), and once every member
// presents one, the old CA leaves the bundle. A member restarted afterwards trusts only the new CA and
// rejoins members whose etcd still trusts only the old one.
func TestPeerCARotation(t *testing.T) {
	w := newWorld(t, 3)
	store := newMemStore(w)
	old := w.ca
	w.start(w.nodes[0])
	w.startAll(w.nodes[1], w.nodes[2])
	w.waitVoters(3)
	put(t, w.client(), "/ca", "the-one-ca")

	l := startLoad(t, w)
	testhelpers.WaitFor(t, 10*time.Millisecond, 10*time.Second, "the load to run", func(context.Context) (bool, string) {
		return l.ops.Load() >= 20, fmt.Sprintf("%d operations", l.ops.Load())
	})

	t.Log("asked for: the rotation begins and ends by itself")
	t0 := time.Now()
	store.request("test-1")
	testhelpers.WaitFor(t, 20*time.Millisecond, 60*time.Second, "the rotation to finish", func(context.Context) (bool, string) {
		st := store.state()
		return !st.CA.Certificate.Equal(old.Certificate) && !st.CA.Rotating(), fmt.Sprintf("replaced %d times; rotating %v", store.replacements(), st.CA.Rotating())
	})
	t.Logf("figure: the peer CA rotated (begun, every member re-issued, old CA dropped) in %s", time.Since(t0).Round(time.Millisecond))
	st := store.state()
	if st.Handled != "test-1" {
		t.Errorf("handled request %q, want test-1", st.Handled)
	}
	newCA := st.CA
	newRoots, oldRoots := x509.NewCertPool(), x509.NewCertPool()
	newRoots.AddCert(newCA.Certificate)
	oldRoots.AddCert(old.Certificate)
	for _, nd := range w.nodes {
		leaf, err := presents(nd, newRoots)
		if err != nil {
			t.Fatalf("%s, to a client trusting only the new CA: %v", nd.name, err)
		}
		if !newCA.Signed(leaf) {
			t.Errorf("%s presents a certificate the new CA did not sign", nd.name)
		}
		if _, err := presents(nd, oldRoots); err != nil {
			t.Errorf("%s, to a client trusting only the old CA: %v", nd.name, err)
		}
	}

	t.Log("settled: no further rotation")
	replaced := store.replacements()
	settledAt := time.Now()
	testhelpers.WaitFor(t, 20*time.Millisecond, 10*time.Second, "the etcd leader to look again several times", func(context.Context) (bool, string) {
		for _, nd := range w.nodes {
			if st := nd.member.Status(); st.Leader && st.CheckedAt.After(settledAt.Add(5*checkInterval)) {
				return true, ""
			}
		}
		return false, "no leader status since"
	})
	if n := store.replacements(); n != replaced {
		t.Errorf("the store was replaced %d more times after the rotation settled", n-replaced)
	}
	ops, failures, first := l.finish()
	t.Logf("figure: %d etcd operations across the rotation, %d failed", ops, failures)
	if failures > 0 {
		t.Fatalf("%d of %d etcd operations failed across the rotation; the first: %v", failures, ops, first)
	}

	t.Log("a member restarted after the rotation trusts the new CA alone and rejoins members whose etcd still trusts only the old one")
	w.stop(w.nodes[1])
	w.start(w.nodes[1])
	w.waitVoters(3)
	if got := w.getFrom(w.nodes[1], "/ca"); got != "the-one-ca" {
		t.Fatalf("%s reads %q after its restart", w.nodes[1].name, got)
	}
	put(t, w.client(), "/after-restart", "yes")
	if got := w.getFrom(w.nodes[2], "/after-restart"); got != "yes" {
		t.Fatalf("%s reads %q", w.nodes[2].name, got)
	}
}

// TestForeignPeerCA: a peer CA put into the store outside a rotation (as whoever holds certapi's token could
// write the Secret) is ignored by every running member, which keeps its certificate; the etcd leader's
// member writes the CA the members hold back into the store; and a member restarted while the store holds
// the foreign CA refuses to start, naming what happened, rather than join with a certificate its peers do
// not trust.
func TestForeignPeerCA(t *testing.T) {
	w := newWorld(t, 3)
	store := newMemStore(w)
	held := w.ca
	w.start(w.nodes[0])
	w.startAll(w.nodes[1], w.nodes[2])
	w.waitVoters(3)
	put(t, w.client(), "/ca", "the-one-ca")

	foreign, err := etcdcluster.NewPeerCA(time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	store.st.CA = foreign
	store.mu.Unlock()
	store.tellMembers()
	for _, nd := range w.nodes {
		if got := nd.member.PeerCA().CA; !got.Equal(held) {
			t.Fatalf("%s took the foreign peer CA", nd.name)
		}
	}
	testhelpers.WaitFor(t, 20*time.Millisecond, 30*time.Second, "the etcd leader's member to write the held CA back", func(context.Context) (bool, string) {
		return store.state().CA.Equal(held), "the store still holds the foreign CA"
	})
	roots := x509.NewCertPool()
	roots.AddCert(held.Certificate)
	for _, nd := range w.nodes {
		leaf, err := presents(nd, roots)
		if err != nil {
			t.Fatalf("%s, to a client trusting the held CA: %v", nd.name, err)
		}
		if !held.Signed(leaf) {
			t.Errorf("%s presents a certificate the held CA did not sign", nd.name)
		}
	}

	t.Log("a client with no certificate, one of the foreign CA, or one of the held CA for a name that is no member's gets nothing from a member")
	pair := func(ca *etcdcluster.PeerCA, name string) []tls.Certificate {
		mc, err := ca.IssueMember(name, []string{"127.0.0.1"}, time.Now(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		p, err := tls.X509KeyPair(mc.CertPEM, mc.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{p}
	}
	for _, tc := range []struct {
		name  string
		certs []tls.Certificate
		reads bool
	}{
		{name: "no client certificate"},
		{name: "a client certificate of the foreign CA", certs: pair(foreign, "intruder")},
		{name: "a client certificate of the held CA for a name that is no member's", certs: pair(held, "intruder")},
		{name: "a client certificate of the held CA for a member's name", certs: pair(held, fmt.Sprintf("certapi-%d", etcdcluster.MaxMembers-1)), reads: true},
	} {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{w.nodes[0].clientURL}, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
			TLS: &tls.Config{RootCAs: roots, Certificates: tc.certs, MinVersion: tls.VersionTLS12}})
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			_, err = c.Get(ctx, "/ca")
			cancel()
			_ = c.Close()
		}
		switch {
		case err == nil && !tc.reads:
			t.Fatalf("%s read certapi's etcd", tc.name)
		case err != nil && tc.reads:
			t.Fatalf("%s read nothing: %v", tc.name, err)
		}
	}

	t.Log("a member restarted while the store holds a foreign CA refuses to start")
	w.stop(w.nodes[2])
	w.mu.Lock()
	w.ca = foreign
	w.mu.Unlock()
	err = w.startFor(w.nodes[2], 30*time.Second)
	if !errors.Is(err, etcdcluster.ErrPeerCANotVouched) {
		t.Fatalf("starting with a foreign peer CA: %v; want ErrPeerCANotVouched", err)
	}
	w.mu.Lock()
	w.ca = held
	w.mu.Unlock()
	w.start(w.nodes[2])
	w.waitVoters(3)
	if got := w.getFrom(w.nodes[2], "/ca"); got != "the-one-ca" {
		t.Fatalf("%s reads %q after its restart", w.nodes[2].name, got)
	}
}
