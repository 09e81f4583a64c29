package keyplugin

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// memBackend is a Backend over keys in memory, with switches for the failures the tests need.
type memBackend struct {
	mu          sync.Mutex
	keys        map[string]memKey
	next        int
	unavailable bool // every call fails with ErrUnavailable
	hang        bool // Sign waits for its context to end
	wrongKey    bool // Sign signs with another key
	signs       int  // Sign calls that reached the backend
}

type memKey struct {
	label string
	key   *ecdsa.PrivateKey
}

func newMemBackend() *memBackend { return &memBackend{keys: map[string]memKey{}} }

func (b *memBackend) NewKey(_ context.Context, label string) (string, crypto.PublicKey, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unavailable {
		return "", nil, fmt.Errorf("%w: token gone", ErrUnavailable)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", nil, err
	}
	b.next++
	ref := fmt.Sprintf("mem:%d", b.next)
	b.keys[ref] = memKey{label: label, key: key}
	return ref, key.Public(), nil
}

func (b *memBackend) Sign(ctx context.Context, ref string, digest []byte, _ crypto.Hash) ([]byte, error) {
	b.mu.Lock()
	b.signs++
	k, ok := b.keys[ref]
	unavailable, hang, wrongKey := b.unavailable, b.hang, b.wrongKey
	b.mu.Unlock()
	switch {
	case hang:
		<-ctx.Done()
		return nil, ctx.Err()
	case unavailable:
		return nil, fmt.Errorf("%w: token gone", ErrUnavailable)
	case !ok:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	case wrongKey:
		other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		return ecdsa.SignASN1(rand.Reader, other, digest)
	}
	return ecdsa.SignASN1(rand.Reader, k.key, digest)
}

func (b *memBackend) Destroy(_ context.Context, ref string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unavailable {
		return fmt.Errorf("%w: token gone", ErrUnavailable)
	}
	if _, ok := b.keys[ref]; !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	delete(b.keys, ref)
	return nil
}

func (b *memBackend) List(_ context.Context, prefix string) ([]KeyInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unavailable {
		return nil, fmt.Errorf("%w: token gone", ErrUnavailable)
	}
	var keys []KeyInfo
	for ref, k := range b.keys {
		if strings.HasPrefix(k.label, prefix) {
			keys = append(keys, KeyInfo{Ref: ref, Label: k.label})
		}
	}
	return keys, nil
}

func (b *memBackend) Check(context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.unavailable {
		return fmt.Errorf("%w: token gone", ErrUnavailable)
	}
	return nil
}

func (b *memBackend) set(f func(*memBackend)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b)
}

// socketDir returns a short temporary directory: a socket's path must fit in 108 bytes, which t.TempDir
// under a long test name may not.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "keyplugin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// serve serves h on socket until the test ends, or until the returned stop is called.
func serve(t *testing.T, socket string, h http.Handler) (stop func()) {
	t.Helper()
	ln, err := Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListener(ctx, ln, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("ServeListener: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// startPlugin serves b on a new socket and returns a client of it.
func startPlugin(t *testing.T, b Backend) (*Client, string) {
	t.Helper()
	socket := filepath.Join(socketDir(t), "key.sock")
	serve(t, socket, NewHandler(b))
	return NewClient("unix://"+socket, 5*time.Second), socket
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	b := newMemBackend()
	c, socket := startPlugin(t, b)
	if err := c.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}
	info, err := os.Stat(socket)
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("the socket's mode is %o, want 600", perm)
	}
	key, ref, err := c.NewKey(ctx, "certapi-ca-1")
	if err != nil {
		t.Fatalf("NewKey: %v", err)
	}
	if ext, ok := key.(signer.ExternalKey); !ok || ext.KeyRef() != ref {
		t.Fatalf("NewKey returned a %T with ref %q; want a signer.ExternalKey with KeyRef %q", key, ref, ref)
	}
	if _, _, err := c.NewKey(ctx, "other-1"); err != nil {
		t.Fatalf("NewKey: %v", err)
	}
	pub := key.Public().(*ecdsa.PublicKey)
	sum256 := sha256.Sum256([]byte("to be signed"))
	sum384 := sha512.Sum384([]byte("to be signed"))
	for _, tc := range []struct {
		name   string
		key    crypto.Signer
		digest []byte
		opts   crypto.SignerOpts
	}{
		{"SHA-256", key, sum256[:], crypto.SHA256},
		{"SHA-384", key, sum384[:], crypto.SHA384},
		{"Key from ref and public key", c.Key(ref, pub), sum256[:], crypto.SHA256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig, err := tc.key.Sign(nil, tc.digest, tc.opts)
			if err != nil {
				t.Fatalf("Sign: %v", err)
			}
			if !ecdsa.VerifyASN1(pub, tc.digest, sig) {
				t.Fatal("the signature does not verify")
			}
		})
	}
	keys, err := c.List(ctx, "certapi-ca-")
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if want := []KeyInfo{{Ref: ref, Label: "certapi-ca-1"}}; fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("List(certapi-ca-) = %v, want %v", keys, want)
	}
	if all, err := c.List(ctx, ""); err != nil || len(all) != 2 {
		t.Errorf("List(\"\") = %v, %v; want both keys", all, err)
	}

	// Destroy is idempotent, and a destroyed key signs no more.
	for i := range 2 {
		if err := c.Destroy(ctx, ref); err != nil {
			t.Fatalf("Destroy #%d: %v", i+1, err)
		}
	}
	_, err = key.Sign(nil, sum256[:], crypto.SHA256)
	if !errors.Is(err, ErrNotFound) || errors.Is(err, signer.ErrKeyUnavailable) {
		t.Errorf("Sign after Destroy: %v; want ErrNotFound and not ErrKeyUnavailable", err)
	}
}

func TestSignErrors(t *testing.T) {
	sum := sha256.Sum256([]byte("x"))
	for _, tc := range []struct {
		name       string
		setup      func(*memBackend)
		timeout    time.Duration
		notRunning bool
		unknownRef bool
		digest     []byte
		opts       crypto.SignerOpts // crypto.SHA256 when nil and not nilOpts
		nilOpts    bool
		pub        crypto.PublicKey
		want       []error // errors.Is must hold for each
		notWant    []error // and for none of these
		wantIn     string  // the message contains this
		noRequest  bool    // refused before any request reaches the backend
	}{
		{name: "unknown key", unknownRef: true, want: []error{ErrNotFound}, notWant: []error{signer.ErrKeyUnavailable}},
		{name: "token unavailable: 503", setup: func(b *memBackend) { b.unavailable = true }, want: []error{signer.ErrKeyUnavailable}, wantIn: "503"},
		{name: "no answer in time", setup: func(b *memBackend) { b.hang = true }, timeout: 200 * time.Millisecond, want: []error{signer.ErrKeyUnavailable}, wantIn: "no answer within"},
		{name: "plugin not listening", notRunning: true, want: []error{signer.ErrKeyUnavailable}},
		{name: "signature of another key", setup: func(b *memBackend) { b.wrongKey = true }, wantIn: "does not verify", notWant: []error{signer.ErrKeyUnavailable}},
		{name: "SHA-1", opts: crypto.SHA1, digest: make([]byte, 20), want: []error{ErrInvalidRequest}, wantIn: `"SHA-256" (a 32-byte digest) or "SHA-384"`, noRequest: true},
		{name: "no hash", opts: crypto.Hash(0), want: []error{ErrInvalidRequest}, wantIn: "hash none", noRequest: true},
		{name: "nil opts", nilOpts: true, want: []error{ErrInvalidRequest}, noRequest: true},
		{name: "digest too short for SHA-384", opts: crypto.SHA384, digest: sum[:], want: []error{ErrInvalidRequest}, wantIn: "a SHA-384 digest is 48 bytes, got 32", noRequest: true},
		{name: "not an ECDSA key", pub: "not a key", wantIn: "holds ECDSA keys", noRequest: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newMemBackend()
			c, socket := startPlugin(t, b)
			_, ref, err := c.NewKey(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			pub := b.keys[ref].key.Public()
			if tc.pub != nil {
				pub = tc.pub
			}
			if tc.unknownRef {
				ref = "mem:none"
			}
			if tc.setup != nil {
				b.set(tc.setup)
			}
			if tc.timeout != 0 {
				c = NewClient(socket, tc.timeout)
			}
			if tc.notRunning {
				c = NewClient(filepath.Join(socketDir(t), "absent.sock"), 0)
			}
			digest, opts := sum[:], crypto.SignerOpts(crypto.SHA256)
			if tc.digest != nil {
				digest = tc.digest
			}
			if tc.opts != nil || tc.nilOpts {
				opts = tc.opts
			}
			_, err = c.Key(ref, pub).Sign(rand.Reader, digest, opts)
			if err == nil {
				t.Fatal("Sign succeeded")
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("Sign: %v; want errors.Is %v", err, w)
				}
			}
			for _, w := range tc.notWant {
				if errors.Is(err, w) {
					t.Errorf("Sign: %v; want not errors.Is %v", err, w)
				}
			}
			if !strings.Contains(err.Error(), tc.wantIn) {
				t.Errorf("Sign: %v; want %q in it", err, tc.wantIn)
			}
			b.mu.Lock()
			signs := b.signs
			b.mu.Unlock()
			if tc.noRequest && signs != 0 {
				t.Errorf("the backend was asked to sign %d times; want the client to refuse first", signs)
			}
		})
	}
}

func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	b := newMemBackend()
	c, _ := startPlugin(t, b)
	_, ref, err := c.NewKey(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	b.set(func(b *memBackend) { b.unavailable = true })
	for name, call := range map[string]func() error{
		"Check":   func() error { return c.Check(ctx) },
		"Destroy": func() error { return c.Destroy(ctx, ref) },
		"NewKey":  func() error { _, _, err := c.NewKey(ctx, "k2"); return err },
		"List":    func() error { _, err := c.List(ctx, ""); return err },
	} {
		if err := call(); !errors.Is(err, signer.ErrKeyUnavailable) {
			t.Errorf("%s: %v; want signer.ErrKeyUnavailable", name, err)
		}
	}
	b.set(func(b *memBackend) { b.unavailable = false })
	if err := c.Check(ctx); err != nil {
		t.Errorf("Check once the token is back: %v", err)
	}
}

// TestPluginRestart checks that a client whose kept-alive connection went away with the plugin signs
// through the restarted plugin, and that a stale socket file is refused as unavailable meanwhile.
func TestPluginRestart(t *testing.T) {
	ctx := context.Background()
	b := newMemBackend()
	socket := filepath.Join(socketDir(t), "key.sock")
	stop := serve(t, socket, NewHandler(b))
	c := NewClient(socket, 5*time.Second)
	key, _, err := c.NewKey(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("x"))
	if _, err := key.Sign(nil, sum[:], crypto.SHA256); err != nil {
		t.Fatal(err)
	}
	stop()
	// What a crash leaves: a socket file nobody listens on.
	ln, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	_ = ln.Close()
	if _, err := key.Sign(nil, sum[:], crypto.SHA256); !errors.Is(err, signer.ErrKeyUnavailable) {
		t.Fatalf("Sign with the plugin down: %v; want signer.ErrKeyUnavailable", err)
	}
	serve(t, socket, NewHandler(b)) // Listen removes the stale file
	if _, err := key.Sign(nil, sum[:], crypto.SHA256); err != nil {
		t.Fatalf("Sign after the restart: %v", err)
	}
}

func TestListenRefuses(t *testing.T) {
	dir := socketDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	live := filepath.Join(dir, "live.sock")
	serve(t, live, NewHandler(newMemBackend()))
	for _, tc := range []struct{ path, want string }{
		{file, "is not a socket"},
		{live, "another process serves"},
		{"", "empty"},
	} {
		if _, err := Listen(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Listen(%q): %v; want %q", tc.path, err, tc.want)
		}
	}
}

// TestHandler sends requests a Client would not, and checks the status and reason of each answer.
func TestHandler(t *testing.T) {
	b := newMemBackend()
	c, socket := startPlugin(t, b)
	_, ref, err := c.NewKey(context.Background(), "k")
	if err != nil {
		t.Fatal(err)
	}
	digest := bytes.Repeat([]byte{1}, 32)
	sign := func(hash string, d []byte) string {
		body, _ := json.Marshal(SignRequest{Ref: ref, Digest: d, Hash: hash})
		return string(body)
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		reason, wantIn           string
	}{
		{"sign", "POST", PathSign, sign("SHA-256", digest), 200, "", ""},
		{"MD5", "POST", PathSign, sign("MD5", digest[:16]), 400, ReasonBadRequest, `want "SHA-256" (a 32-byte digest) or "SHA-384"`},
		{"digest length", "POST", PathSign, sign("SHA-384", digest), 400, ReasonBadRequest, "48 bytes, got 32"},
		{"unknown field", "POST", PathSign, `{"ref":"x","digest":"","hash":"SHA-256","algorithm":"RSA"}`, 400, ReasonBadRequest, "unknown field"},
		{"not JSON", "POST", PathKeys, `label=x`, 400, ReasonBadRequest, "not a *keyplugin.NewKeyRequest"},
		{"trailing data", "POST", PathKeys, `{"label":"x"} {}`, 400, ReasonBadRequest, "after its JSON object"},
		{"empty label", "POST", PathKeys, `{"label":""}`, 400, ReasonBadRequest, "label is empty"},
		{"long label", "POST", PathKeys, `{"label":"` + strings.Repeat("a", MaxLabelLength+1) + `"}`, 400, ReasonBadRequest, "at most 128"},
		{"control character in label", "POST", PathKeys, `{"label":"a\nb"}`, 400, ReasonBadRequest, "control character"},
		{"space in ref", "POST", PathDestroy, `{"ref":"a b"}`, 400, ReasonBadRequest, "printable ASCII"},
		{"oversized body", "POST", PathSign, `{"ref":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, 413, ReasonTooLarge, "over 65536 bytes"},
		{"unknown key", "POST", PathSign, `{"ref":"mem:none","digest":"` + strings.Repeat("A", 43) + `=","hash":"SHA-256"}`, 404, ReasonKeyNotFound, "mem:none"},
		{"destroy unknown key", "POST", PathDestroy, `{"ref":"mem:none"}`, 204, "", ""},
		{"unknown path", "POST", "/v2/sign", `{}`, 404, ReasonNotServed, "serves no /v2/sign"},
		{"wrong method", "GET", PathSign, "", 405, ReasonNotServed, "takes POST, not GET"},
		{"long label prefix", "GET", PathKeys + "?labelPrefix=" + strings.Repeat("a", MaxLabelLength+1), "", 400, ReasonBadRequest, "labelPrefix"},
		{"health", "GET", PathHealth, "", 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := rawCall(t, socket, tc.method, tc.path, tc.body)
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			if tc.reason == "" {
				return
			}
			var e ErrorResponse
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("the error answer is not JSON: %v: %s", err, body)
			}
			if e.Reason != tc.reason || !strings.Contains(e.Error, tc.wantIn) {
				t.Errorf("answer %+v; want reason %s and %q in the error", e, tc.reason, tc.wantIn)
			}
		})
	}
}

// TestDestroyOnOlderPlugin checks that a 404 for a path the plugin does not serve is not taken for a key
// that is already gone.
func TestDestroyOnOlderPlugin(t *testing.T) {
	socket := filepath.Join(socketDir(t), "old.sock")
	serve(t, socket, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, ReasonNotServed, "no "+r.URL.Path)
	}))
	err := NewClient(socket, 0).Destroy(context.Background(), "mem:1")
	if err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "does not serve") {
		t.Errorf("Destroy on a plugin without /v1/destroy: %v; want an error saying it does not serve it", err)
	}
}

// rawCall sends one request to the plugin on socket and returns the status and body.
func rawCall(t *testing.T, socket, method, path, body string) (int, []byte) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequest(method, "http://keyplugin"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, data
}
