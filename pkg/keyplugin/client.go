package keyplugin

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// DefaultTimeout is a Client's timeout when NewClient is given none.
const DefaultTimeout = 10 * time.Second

// Client calls a key plugin over its Unix socket. It is safe for concurrent use. Every error that means
// the plugin or its device cannot answer right now (the socket missing or refusing, a connection reset,
// the timeout, a 503) wraps signer.ErrKeyUnavailable; an answer that there is no such key wraps
// ErrNotFound. Errors never contain digests or signatures.
type Client struct {
	socket  string
	timeout time.Duration
	http    *http.Client
}

// NewClient returns a client of the plugin on socket (a path or unix:///path) whose calls each take at
// most timeout (DefaultTimeout when it is not positive), whatever their context allows. It does no I/O:
// the plugin need not be up yet.
func NewClient(socket string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	path := SocketPath(socket)
	var dialer net.Dialer
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, "unix", path)
		},
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	return &Client{
		socket:  path,
		timeout: timeout,
		http: &http.Client{
			Transport:     transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// NewKey asks the plugin to make a new ECDSA P-256 key labelled label and returns it (a *Key) with its
// reference. The call is not retried: a lost answer leaves a key nobody knows the reference of, which
// List finds by its label.
func (c *Client) NewKey(ctx context.Context, label string) (crypto.Signer, string, error) {
	what := fmt.Sprintf("making key %q", label)
	var resp NewKeyResponse
	if err := c.call(ctx, what, http.MethodPost, PathKeys, NewKeyRequest{Label: label}, false, http.StatusCreated, &resp); err != nil {
		return nil, "", err
	}
	if err := checkRef(resp.Ref); err != nil {
		return nil, "", fmt.Errorf("%s through the key plugin at %s: the plugin answered an unusable reference: %w", what, c.socket, err)
	}
	pub, err := x509.ParsePKIXPublicKey(resp.PublicKey)
	if err != nil {
		return nil, "", fmt.Errorf("%s through the key plugin at %s: the public key of %s is not DER PKIX: %w", what, c.socket, resp.Ref, err)
	}
	ecPub, ok := pub.(*ecdsa.PublicKey)
	if !ok || ecPub.Curve != elliptic.P256() {
		return nil, "", fmt.Errorf("%s through the key plugin at %s: the public key of %s is a %s, want ECDSA P-256", what, c.socket, resp.Ref, describeKey(pub))
	}
	return c.Key(resp.Ref, ecPub), resp.Ref, nil
}

// Key returns the key ref names, whose public half is pub (from the CA's certificate). It does no I/O:
// a reference that names no key, or another key than pub's, fails at the first Sign.
func (c *Client) Key(ref string, pub crypto.PublicKey) crypto.Signer {
	return &Key{c: c, ref: ref, pub: pub}
}

// Destroy asks the plugin to destroy the key ref names. A key that is already gone is no error.
func (c *Client) Destroy(ctx context.Context, ref string) error {
	err := c.call(ctx, "destroying "+ref, http.MethodPost, PathDestroy, DestroyRequest{Ref: ref}, true, http.StatusNoContent, nil)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// List returns the keys in the plugin's device whose label starts with labelPrefix (every key for ""):
// how keys left behind by a lost answer or a crash are found.
func (c *Client) List(ctx context.Context, labelPrefix string) ([]KeyInfo, error) {
	var resp ListResponse
	path := PathKeys + "?" + url.Values{"labelPrefix": {labelPrefix}}.Encode()
	if err := c.call(ctx, fmt.Sprintf("listing keys labelled %q...", labelPrefix), http.MethodGet, path, nil, true, http.StatusOK, &resp); err != nil {
		return nil, err
	}
	return resp.Keys, nil
}

// Check returns nil when the plugin answers that its device is usable.
func (c *Client) Check(ctx context.Context) error {
	return c.call(ctx, "checking health", http.MethodGet, PathHealth, nil, true, http.StatusOK, nil)
}

// Key is a key held by the plugin's device: a crypto.Signer that signs there, and a signer.ExternalKey
// whose KeyRef is the plugin's reference.
type Key struct {
	c   *Client
	ref string
	pub crypto.PublicKey
}

var _ signer.ExternalKey = (*Key)(nil)

// Public returns the key's public half.
func (k *Key) Public() crypto.PublicKey { return k.pub }

// KeyRef returns the plugin's reference of the key; it is not secret.
func (k *Key) KeyRef() string { return k.ref }

// Sign signs digest, the SHA-256 or SHA-384 hash opts.HashFunc() names, inside the plugin's device within
// the client's timeout, and returns the ASN.1 DER signature once it verifies with the key's public half:
// a device that signs wrongly, or a reference that names another key, fails here rather than in a
// certificate. rand is not used: the device has its own.
func (k *Key) Sign(_ io.Reader, digest []byte, opts crypto.SignerOpts) ([]byte, error) {
	what := "signing with " + k.ref
	pub, ok := k.pub.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s: its public key is a %s; the key plugin holds ECDSA keys", what, describeKey(k.pub))
	}
	if opts == nil {
		return nil, fmt.Errorf("%s: %w: no hash given (nil SignerOpts)", what, ErrInvalidRequest)
	}
	hash := opts.HashFunc()
	name, err := HashName(hash)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := checkDigest(hash, digest); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var resp SignResponse
	req := SignRequest{Ref: k.ref, Digest: digest, Hash: name}
	if err := k.c.call(context.Background(), what, http.MethodPost, PathSign, req, true, http.StatusOK, &resp); err != nil {
		return nil, err
	}
	if !ecdsa.VerifyASN1(pub, digest, resp.Signature) {
		return nil, fmt.Errorf("%s: the key plugin at %s answered a signature that does not verify with the key's public key (the reference names another key, or the device signs wrongly); refusing it", what, k.c.socket)
	}
	return resp.Signature, nil
}

// call sends body (nil for none) as JSON to path and decodes a want answer into out (nil to ignore it).
// Replayable calls are retried once by net/http when a kept-alive connection turns out dead (a restarted
// plugin); what says what the call does, for errors.
func (c *Client) call(ctx context.Context, what, method, path string, body any, replayable bool, want int, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var reqBody io.Reader = http.NoBody
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s: encoding the request: %w", what, err)
		}
		reqBody = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://keyplugin"+path, reqBody)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if replayable {
		// Present and nil: net/http treats the request as idempotent and sends no such header.
		req.Header["Idempotency-Key"] = nil
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(ctx, what, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	if err != nil {
		return c.transportError(ctx, what, err)
	}
	if len(data) > MaxBodyBytes {
		return fmt.Errorf("%s through the key plugin at %s: an answer over %d bytes", what, c.socket, MaxBodyBytes)
	}
	if resp.StatusCode != want {
		return c.statusError(what, resp.StatusCode, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s through the key plugin at %s: the answer is not a %T in JSON: %v", what, c.socket, out, err)
	}
	return nil
}

// transportError wraps signer.ErrKeyUnavailable around a failure to reach the plugin or read its answer,
// unless the caller's own context was cancelled.
func (c *Client) transportError(ctx context.Context, what string, err error) error {
	if errors.Is(err, context.Canceled) && errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%s through the key plugin at %s: %w", what, c.socket, err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s through the key plugin at %s: %w: no answer within %s: %w", what, c.socket, signer.ErrKeyUnavailable, c.timeout, err)
	}
	return fmt.Errorf("%s through the key plugin at %s: %w: %w", what, c.socket, signer.ErrKeyUnavailable, err)
}

// statusError turns an answer other than the one expected into an error wrapping what its status and
// reason mean.
func (c *Client) statusError(what string, status int, data []byte) error {
	var e ErrorResponse
	msg := "no error message"
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	prefix := fmt.Sprintf("%s through the key plugin at %s", what, c.socket)
	switch {
	case status == http.StatusNotFound && e.Reason == ReasonKeyNotFound:
		return fmt.Errorf("%s: %w: %s", prefix, ErrNotFound, msg)
	case status == http.StatusServiceUnavailable, status == http.StatusBadGateway, status == http.StatusGatewayTimeout:
		return fmt.Errorf("%s: %w: %d: %s", prefix, signer.ErrKeyUnavailable, status, msg)
	case status == http.StatusBadRequest, status == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("%s: %w: %d: %s", prefix, ErrInvalidRequest, status, msg)
	case e.Reason == ReasonNotServed:
		return fmt.Errorf("%s: the plugin does not serve this call (an older plugin?): %d: %s", prefix, status, msg)
	}
	return fmt.Errorf("%s: the plugin answered %d: %s", prefix, status, msg)
}

// describeKey names a public key's type for errors.
func describeKey(pub crypto.PublicKey) string {
	if k, ok := pub.(*ecdsa.PublicKey); ok && k.Curve != nil {
		return "ECDSA " + k.Curve.Params().Name + " key"
	}
	return fmt.Sprintf("%T", pub)
}
