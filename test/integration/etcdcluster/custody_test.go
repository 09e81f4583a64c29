package etcdcluster

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/secretbox"

	"github.com/certapi/certapi/pkg/etcdcluster"
	"github.com/certapi/certapi/test/testhelpers"
)

const peerCARecordKey = "/registry/certapi.dev/etcdpeercas/default"

// tokenVerifier stands in for incluster.PodTokenVerifier (which incluster_test runs against a real
// kube-apiserver): the proof "token-of-<name>" establishes member <name>; it counts what it verified.
type tokenVerifier struct {
	mu       sync.Mutex
	verified []string
}

func (v *tokenVerifier) Verify(_ context.Context, proof string) (etcdcluster.Identity, error) {
	name, ok := strings.CutPrefix(proof, "token-of-")
	if !ok {
		return etcdcluster.Identity{}, errors.New("not a member's token")
	}
	v.mu.Lock()
	v.verified = append(v.verified, name)
	v.mu.Unlock()
	return etcdcluster.Identity{Name: name}, nil
}

func (v *tokenVerifier) count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.verified)
}

// custodyWorld runs w's members with the peer CA's key in their etcd: the store (as the Secret) holds
// the public part only, node 0 alone starts with the key, the others enroll. It returns the verifier and
// a map of each node's enrollment URL.
func custodyWorld(t *testing.T, w *world) (*tokenVerifier, map[string]string) {
	t.Helper()
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		t.Fatal(err)
	}
	transformer := value.NewPrefixTransformers(errors.New("no provider"), value.PrefixTransformer{Prefix: []byte("k8s:enc:secretbox:v1:key1:"), Transformer: secretbox.NewSecretboxTransformer(key)})
	verifier := &tokenVerifier{}
	enrollURLs := map[string]string{}
	for _, nd := range w.nodes {
		enrollURLs[nd.clientURL] = "https://127.0.0.1:" + freePort(t)
	}
	withKey := w.ca
	made := false
	public := *w.ca
	public.Key = nil
	w.ca = &public
	w.configure = func(nd *node, cfg *etcdcluster.Config) {
		cfg.PeerCARecordKey = peerCARecordKey
		cfg.Transformer = transformer
		cfg.RequireEncryptedRecord = true
		cfg.ListenEnrollURL = enrollURLs[nd.clientURL]
		cfg.EnrollmentURL = func(clientURL string) string { return enrollURLs[clientURL] + etcdcluster.EnrollPath }
		cfg.Verifier = verifier
		name := nd.name
		cfg.Proof = func() (string, error) { return "token-of-" + name, nil }
		if nd == w.nodes[0] && !made {
			// The first member made the CA: it holds the key when it first starts, and only then.
			made = true
			ca := *cfg.CA
			ca.Key = withKey.Key
			cfg.CA = &ca
		}
	}
	return verifier, enrollURLs
}

// TestEnrolledMembersAndKeyCustody: with the peer CA's key kept only in the members' etcd, the members
// that start without it enroll through the one that holds it, which checks their proof of identity and
// issues their certificate for the name it proves; they then load the key from the sealed record. A
// request whose CSR names another member than its proof, or with no valid proof, gets nothing. A
// rotation reaches every member with the new key through etcd while the store never holds a key, and a
// member restarted with its certificate on its volume does not enroll again.
func TestEnrolledMembersAndKeyCustody(t *testing.T) {
	w := newWorld(t, 3)
	verifier, enrollURLs := custodyWorld(t, w)
	store := newMemStore(w)
	store.publicOnly = true
	w.start(w.nodes[0])
	w.startAll(w.nodes[1], w.nodes[2])
	w.waitVoters(3)
	if n := verifier.count(); n != 2 {
		t.Errorf("%d members enrolled, want 2 (certapi-1 and certapi-2)", n)
	}
	put(t, w.client(), "/ca", "the-one-ca")

	t.Log("every member holds the key, loaded from the record")
	waitAllHoldKey(t, w)

	t.Log("the record is sealed: the key is not in etcd in the clear")
	c := w.client()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, peerCARecordKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading the record: %v (%d keys)", err, len(resp.Kvs))
	}
	keyPEM, err := w.nodes[0].member.PeerCA().CA.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if v := resp.Kvs[0].Value; !bytes.HasPrefix(v, []byte("k8s:enc:secretbox:v1:key1:")) || bytes.Contains(v, keyPEM) || bytes.Contains(v, []byte("PRIVATE KEY")) {
		t.Fatalf("the peer CA record is not sealed: %.60q...", v)
	}
	if st := store.state(); st.CA.Key != nil || st.KeyInStore {
		t.Fatal("the store holds the peer CA's key")
	}

	t.Log("a request for another member's certificate, or without a member's proof, is refused")
	target := enrollURLs[w.nodes[0].clientURL] + etcdcluster.EnrollPath
	roots := x509.NewCertPool()
	roots.AddCert(w.nodes[0].member.PeerCA().CA.Certificate)
	for _, tc := range []struct{ name, proof, csrName, want string }{
		{"the CSR names another member", "token-of-certapi-1", "certapi-0", "the CSR names member \"certapi-0\", the proof of identity \"certapi-1\""},
		{"no member's proof", "a-stolen-api-token", "certapi-1", "the proof of identity was not accepted"},
		{"no proof", "", "certapi-1", "no proof of identity"},
	} {
		status, body := postEnrollment(t, target, roots, tc.proof, tc.csrName)
		if status != http.StatusForbidden || !strings.Contains(body, tc.want) {
			t.Errorf("%s: answered %d %q, want 403 with %q", tc.name, status, body, tc.want)
		}
	}
	if status, body := postEnrollment(t, target, roots, "token-of-certapi-1", ""); status != http.StatusForbidden {
		t.Errorf("a CSR naming nobody: answered %d %q, want 403", status, body)
	}

	t.Log("a rotation: the new key reaches every member through etcd, the store holds none")
	old := store.state().CA
	store.request("custody-1")
	testhelpers.WaitFor(t, 20*time.Millisecond, 60*time.Second, "the rotation to finish", func(context.Context) (bool, string) {
		st := store.state()
		return !st.CA.Certificate.Equal(old.Certificate) && !st.CA.Rotating(), fmt.Sprintf("replaced %d times; rotating %v", store.replacements(), st.CA.Rotating())
	})
	if st := store.state(); st.CA.Key != nil || st.KeyInStore {
		t.Fatal("the store holds the rotated peer CA's key")
	}
	waitAllHoldKey(t, w)
	newCA := store.state().CA
	for _, nd := range w.nodes {
		if got := nd.member.PeerCA().CA; !got.Certificate.Equal(newCA.Certificate) {
			t.Errorf("%s holds %s, want the rotated CA %s", nd.name, got.Certificate.Subject.CommonName, newCA.Certificate.Subject.CommonName)
		}
	}

	t.Log("a member restarted with its certificate on its volume starts without enrolling")
	before := verifier.count()
	w.stop(w.nodes[2])
	w.start(w.nodes[2])
	w.waitVoters(3)
	if got := w.getFrom(w.nodes[2], "/ca"); got != "the-one-ca" {
		t.Fatalf("certapi-2 reads %q after its restart", got)
	}
	if n := verifier.count(); n != before {
		t.Errorf("the restarted member enrolled again (%d enrollments, want %d)", n, before)
	}

	t.Log("every member stopped and its certificate unusable (stopped past its end): each restarts with the key from its own data")
	for _, nd := range w.nodes {
		w.stop(nd)
	}
	for _, nd := range w.nodes {
		if err := os.Remove(filepath.Join(nd.dir, etcdcluster.PKIDirName, "member.pem")); err != nil {
			t.Fatal(err)
		}
	}
	w.startAll(w.nodes...)
	w.waitVoters(3)
	if got := w.getFrom(w.nodes[1], "/ca"); got != "the-one-ca" {
		t.Fatalf("certapi-1 reads %q after the cluster's restart", got)
	}
	if n := verifier.count(); n != before {
		t.Errorf("members enrolled after the cluster's restart (%d enrollments, want %d)", n, before)
	}
}

// TestUpgradeDropsTheKeyFromTheStore: members of a cluster whose store still holds the key (the custody
// of earlier versions) store it in etcd, and once every member keeps it there the etcd leader removes it
// from the store and rotates the peer CA, whose key was readable there: a successor whose key never was
// in the store signs, and every member holds a certificate of it.
func TestUpgradeDropsTheKeyFromTheStore(t *testing.T) {
	w := newWorld(t, 3)
	withKey := w.ca
	custodyWorld(t, w)
	// As the Secret of earlier versions: the key in the store, which every member reads at start.
	w.ca = withKey
	store := newMemStore(w)
	// Members of custody etcd write the public part only (incluster.PeerCASecret's PublicOnly), and read
	// the key the store still holds.
	store.publicOnly = true
	w.start(w.nodes[0])
	w.startAll(w.nodes[1], w.nodes[2])
	w.waitVoters(3)
	testhelpers.WaitFor(t, 50*time.Millisecond, 30*time.Second, "the etcd leader to drop the key from the store", func(context.Context) (bool, string) {
		st := store.state()
		return !st.KeyInStore && st.CA.Key == nil, fmt.Sprintf("key in store: %v", st.KeyInStore)
	})
	testhelpers.WaitFor(t, 50*time.Millisecond, time.Minute, "the rotation away from the CA whose key was in the store to finish", func(context.Context) (bool, string) {
		st := store.state()
		return !st.CA.Certificate.Equal(withKey.Certificate) && !st.CA.Rotating() && st.Handled == etcdcluster.KeyLeftStoreRotation(withKey) && st.CA.Key == nil,
			fmt.Sprintf("store holds %s (rotating %v), handled %q, key in store %v", st.CA.Certificate.Subject.CommonName, st.CA.Rotating(), st.Handled, st.CA.Key != nil)
	})
	waitAllHoldKey(t, w)
	next := store.state().CA
	for _, nd := range w.nodes {
		if got := nd.member.PeerCA().CA; !got.Certificate.Equal(next.Certificate) {
			t.Errorf("%s holds %s, not the successor %s", nd.name, got.Certificate.Subject.CommonName, next.Certificate.Subject.CommonName)
		}
	}
}

func waitAllHoldKey(t *testing.T, w *world) {
	t.Helper()
	testhelpers.WaitFor(t, 50*time.Millisecond, 30*time.Second, "every member to hold the peer CA's key", func(context.Context) (bool, string) {
		var without []string
		for _, nd := range w.nodes {
			if nd.member != nil && nd.member.PeerCA().CA.Key == nil {
				without = append(without, nd.name)
			}
		}
		return len(without) == 0, fmt.Sprintf("without the key: %v", without)
	})
}

// postEnrollment sends an enrollment request as a joining member would, with a CSR for csrName.
func postEnrollment(t *testing.T, target string, roots *x509.CertPool, proof, csrName string) (int, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: csrName}}, key)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(map[string]any{"proof": proof, "csr": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := client.Post(target, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("posting to %s: %v", target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestEveryVolumeLostWithKeyCustody: with the key only in the members' etcd, losing every volume loses
// the key. The first member, which nobody answers and whose peers all report having no data, makes a new
// peer CA and bootstraps a new cluster; the others take the store's new CA and enroll with it, one of them
// holding, with no data, a member certificate and trust of the lost CA (it enrolled on its new volume with
// a member still terminating): it drops them, while it waits and when it starts again, instead of
// waiting for ever or refusing the store's CA.
func TestEveryVolumeLostWithKeyCustody(t *testing.T) {
	w := newWorld(t, 3)
	verifier, _ := custodyWorld(t, w)
	store := newMemStore(w)
	store.publicOnly = true
	w.start(w.nodes[0])
	w.startAll(w.nodes[1], w.nodes[2])
	w.waitVoters(3)
	old := store.state().CA

	for _, nd := range w.nodes {
		w.stop(nd)
	}
	pki := filepath.Join(w.nodes[2].dir, etcdcluster.PKIDirName)
	enrolledBefore := t.TempDir()
	if err := os.CopyFS(enrolledBefore, os.DirFS(pki)); err != nil {
		t.Fatal(err)
	}
	for _, nd := range w.nodes {
		if err := os.RemoveAll(nd.dir); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.CopyFS(pki, os.DirFS(enrolledBefore)); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	w.replicas = 3
	custody := w.configure
	w.configure = func(nd *node, cfg *etcdcluster.Config) {
		custody(nd, cfg)
		cfg.Bootstrap = allLost{}
	}
	w.mu.Unlock()
	before := verifier.count()
	w.startAll(w.nodes...)
	w.waitVoters(3)
	st := store.state()
	if st.CA.Certificate.Equal(old.Certificate) || st.KeyInStore {
		t.Fatalf("the store holds the lost cluster's CA, or a key (key in store: %v)", st.KeyInStore)
	}
	if n := verifier.count() - before; n != 2 {
		t.Errorf("%d members enrolled into the new cluster, want 2", n)
	}
	waitAllHoldKey(t, w)
	put(t, w.client(), "/ca", "a-new-cluster")

	t.Log("the same member started again, with no data and the lost CA's certificate: it drops them at start")
	w.stop(w.nodes[2])
	if err := os.RemoveAll(w.nodes[2].dir); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(pki, os.DirFS(enrolledBefore)); err != nil {
		t.Fatal(err)
	}
	w.start(w.nodes[2])
	w.waitVoters(3)
	if got := w.getFrom(w.nodes[2], "/ca"); got != "a-new-cluster" {
		t.Fatalf("%s reads %q after joining again", w.nodes[2].name, got)
	}
}
