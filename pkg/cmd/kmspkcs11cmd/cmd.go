// Package kmspkcs11cmd is the command line of certapi-kms-pkcs11, the plugin that keeps certapi's keys in a
// PKCS#11 token: the KMS v2 API (an AES key that encrypts the CA keys) on one Unix socket, certapi's CA
// keys themselves (pkg/keyplugin: ECDSA keys made and used in the token) on another, and create-key.
package kmspkcs11cmd

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"k8s.io/klog/v2"
	kmsapi "k8s.io/kms/apis/v2"
	kmsservice "k8s.io/kms/pkg/service"

	"github.com/certapi/certapi/pkg/keyplugin"
	"github.com/certapi/certapi/pkg/kmsplugin"
	"github.com/certapi/certapi/pkg/kmsplugin/pkcs11token"
	"github.com/certapi/certapi/pkg/version"
)

// EnvPIN is the environment variable the user PIN may come from instead of --pin-file.
const EnvPIN = "CERTAPI_KMS_PKCS11_PIN"

// Name is the program's name.
const Name = "certapi-kms-pkcs11"

// tokenOptions are the flags that select the token and the key.
type tokenOptions struct {
	module, tokenLabel, pinFile, keyLabel string
	slot                                  int
}

func (o *tokenOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.module, "module", "", "Path of the PKCS#11 module (shared library) of the HSM, e.g. /usr/lib/softhsm/libsofthsm2.so. Required.")
	fs.StringVar(&o.tokenLabel, "token-label", "", "Label of the token that holds the keys. Either this or --slot.")
	fs.IntVar(&o.slot, "slot", -1, "Slot ID of the token, when --token-label is not given.")
	fs.StringVar(&o.pinFile, "pin-file", "", "File holding the token's user PIN (a trailing newline is ignored). Without it the PIN is read from $"+EnvPIN+".")
	fs.StringVar(&o.keyLabel, "key-label", "", "CKA_LABEL of the AES key that encrypts through the KMS v2 API. Keys under other labels still decrypt what they encrypted, while they exist in the token. Required with --listen and by create-key; not used by --ca-key-socket.")
}

// config turns the flags into a pkcs11token.Config, reading the PIN.
func (o *tokenOptions) config() (pkcs11token.Config, error) {
	if (o.tokenLabel == "") == (o.slot < 0) {
		return pkcs11token.Config{}, errors.New("give exactly one of --token-label and --slot")
	}
	pin, err := o.pin()
	if err != nil {
		return pkcs11token.Config{}, err
	}
	cfg := pkcs11token.Config{Module: o.module, TokenLabel: o.tokenLabel, PIN: pin, KeyLabel: o.keyLabel}
	if o.slot >= 0 {
		cfg.Slot = uint(o.slot)
	}
	return cfg, cfg.Validate()
}

func (o *tokenOptions) pin() (string, error) {
	env, inEnv := os.LookupEnv(EnvPIN)
	switch {
	case o.pinFile != "" && inEnv:
		return "", fmt.Errorf("give the PIN either with --pin-file or in $%s, not both", EnvPIN)
	case o.pinFile != "":
		data, err := os.ReadFile(o.pinFile)
		if err != nil {
			return "", fmt.Errorf("reading the PIN: %w", err)
		}
		return strings.TrimRight(string(data), "\r\n"), nil
	case inEnv:
		return env, nil
	}
	return "", fmt.Errorf("no PIN: give --pin-file or set $%s", EnvPIN)
}

// NewCommand returns the certapi-kms-pkcs11 command; it serves until ctx is done.
func NewCommand(ctx context.Context) *cobra.Command {
	var (
		tok         tokenOptions
		listen      string
		caKeySocket string
		timeout     time.Duration
		showVersion bool
	)
	cmd := &cobra.Command{
		Use:   Name,
		Short: "Keeps certapi's keys in a PKCS#11 token (an HSM): a KMS v2 plugin, and certapi's CA keys",
		Long: Name + ` serves, on Unix sockets, what keeps certapi's keys in a PKCS#11 token:

  --listen         the Kubernetes KMS v2 plugin API (k8s.io/kms), for an EncryptionConfiguration's kms
                   provider (apiVersion: v2) in certapi or kube-apiserver: an AES key in the token
                   encrypts the CA keys certapi stores in etcd. Needs --key-label.
  --ca-key-socket  certapi's CA keys themselves (pkg/keyplugin, JSON over HTTP): ECDSA P-256 keys made in
                   the token, which sign there and never leave it; certapi stores only their references.

Either socket, or both: --listen="" serves the CA keys alone, and a process with only --listen (the
default) serves the KMS v2 API alone, as before.

KMS v2 API (--listen).

Every encryption happens inside the token: AES-GCM (CKM_AES_GCM) under the AES key labelled --key-label,
with a random 96-bit IV per call stored beside the ciphertext and the key ID bound as additional
authenticated data. The key must be sensitive and not extractable; "` + Name + ` create-key" makes one.
The key ID reported to the API server is the RFC 7512 URI pkcs11:object=<label>;id=<CKA_ID>;type=secret-key:
it names the key, it is not the key. Decryption uses the key the stored key ID names, so after a rotation
(a new key under a new label, this plugin restarted with --key-label pointing at it) what the old key
encrypted still decrypts while the old key object exists in the token.

Status reports healthz "ok" only when the token encrypts and decrypts a probe under the current key.

CA keys (--ca-key-socket). certapi asks for a new key (POST /v1/keys: CKM_EC_KEY_PAIR_GEN on P-256, a
random CKA_ID shared by both halves, the private half a token object that is private, sensitive, not
extractable and may only sign), signs digests with it (POST /v1/sign: CKM_ECDSA), lists keys by label
prefix (GET /v1/keys) and destroys a key no CA uses any more (POST /v1/destroy). A key's reference is the
RFC 7512 URI pkcs11:id=<CKA_ID>;type=private: it names the key, it is not the key. GET /v1/health answers
200 while the token's session is logged in, 503 otherwise.

Both sockets are made readable and writable by this process's user only: run certapi (or the API server)
as the same user (a sidecar in the same pod, sharing an emptyDir). Logs carry key IDs, key references and
PKCS#11 return codes, never a key, a PIN, a plaintext, a digest or a signature.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if showVersion {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), version.String(Name))
				return err
			}
			cfg, err := tok.config()
			if err != nil {
				return err
			}
			return serve(ctx, cfg, listen, caKeySocket, timeout)
		},
	}
	cmd.CompletionOptions.DisableDefaultCmd = true
	tok.addFlags(cmd.PersistentFlags())
	cmd.Flags().StringVar(&listen, "listen", "/var/run/certapi-kms/kms.sock", "Unix socket to serve the KMS v2 API on (a path, or unix:///path): the endpoint of the EncryptionConfiguration's kms provider. A stale socket file there is removed. Empty (--listen=\"\") serves no KMS v2 API, for a process that serves only --ca-key-socket.")
	cmd.Flags().StringVar(&caKeySocket, "ca-key-socket", "", "Unix socket to serve certapi's CA keys on (a path, or unix:///path): ECDSA keys made and used inside the token (pkg/keyplugin), for a certapi whose CA keys live in the token. A stale socket file there is removed. Empty serves none.")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "gRPC connection timeout of the KMS v2 API.")
	cmd.Flags().BoolVar(&showVersion, "version", false, "Print the version and exit.")
	cmd.AddCommand(newCreateKeyCommand(ctx, &tok))
	return cmd
}

func newCreateKeyCommand(ctx context.Context, tok *tokenOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "create-key",
		Short: "Make a new AES-256 key in the token under --key-label, and print its key ID",
		Long: `create-key makes a new AES-256 key (CKM_AES_KEY_GEN) in the token under --key-label, with a random
CKA_ID: a token object, private, sensitive and not extractable, allowed to encrypt and decrypt and nothing
else. It refuses a label an AES key in the token already has: a rotation makes a key under a new label.
It prints the new key's KMS key ID.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := tok.config()
			if err != nil {
				return err
			}
			if cfg.KeyLabel == "" {
				return errors.New("create-key needs --key-label, the label of the new key")
			}
			t, err := pkcs11token.Open(ctx, cfg)
			if err != nil {
				return err
			}
			defer t.Close() //nolint:errcheck // nothing to do about it on the way out
			ref, err := t.CreateKey(ctx, cfg.KeyLabel)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), ref.KeyID())
			return err
		},
	}
}

// shutdownGrace bounds how long serve waits for calls in flight once ctx is done.
const shutdownGrace = 5 * time.Second

// serve opens the token and serves on each socket given: the KMS v2 API on listen, once the current key
// works, and the CA keys on caKeySocket, once the token's session is usable. It serves until ctx is done,
// or until serving on one socket fails, which stops the other.
func serve(ctx context.Context, cfg pkcs11token.Config, listen, caKeySocket string, timeout time.Duration) error {
	kmsPath, caPath := keyplugin.SocketPath(listen), keyplugin.SocketPath(caKeySocket)
	switch {
	case kmsPath == "" && caPath == "":
		return errors.New("nothing to serve: give --listen (the KMS v2 API), --ca-key-socket (certapi's CA keys), or both")
	case kmsPath != "" && cfg.KeyLabel == "":
		return errors.New(`--key-label is required to serve the KMS v2 API on --listen; to serve only the CA keys on --ca-key-socket, give --listen=""`)
	case kmsPath == caPath:
		return fmt.Errorf("--listen and --ca-key-socket are both %s: give each its own socket", kmsPath)
	}
	t, err := pkcs11token.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer t.Close() //nolint:errcheck // nothing to do about it on the way out
	logger := klog.FromContext(ctx)
	// Only this user may connect: the sockets are made under this mask.
	syscall.Umask(0o077)

	var servers []func(context.Context) error
	var listeners []net.Listener
	defer func() {
		for _, ln := range listeners {
			_ = ln.Close() // a no-op once its server has closed it
		}
	}()
	if kmsPath != "" {
		svc := kmsplugin.NewService(t)
		// Refuse to start with a key that cannot serve: better a clear exit than a plugin that answers
		// every call with the same error.
		status, err := svc.Status(ctx)
		if err != nil {
			return fmt.Errorf("checking the current key: %w", err)
		}
		ln, err := keyplugin.Listen(kmsPath)
		if err != nil {
			return err
		}
		listeners = append(listeners, ln)
		servers = append(servers, func(ctx context.Context) error {
			logger.Info("Serving the KMS v2 API", "socket", kmsPath, "keyID", status.KeyID)
			return serveKMS(ctx, ln, kmsPath, svc, timeout, logger)
		})
	}
	if caPath != "" {
		keys := t.CAKeys()
		if err := keys.Check(ctx); err != nil {
			return fmt.Errorf("checking the token for the CA keys: %w", err)
		}
		ln, err := keyplugin.Listen(caPath)
		if err != nil {
			return err
		}
		listeners = append(listeners, ln)
		servers = append(servers, func(ctx context.Context) error {
			logger.Info("Serving the CA keys", "socket", caPath)
			err := keyplugin.ServeListener(ctx, ln, keyplugin.NewHandler(loggingBackend{Backend: keys, log: logger}))
			if err == nil {
				logger.Info("Stopped serving", "socket", caPath)
			}
			return err
		})
	}

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, len(servers))
	for _, run := range servers {
		go func() {
			err := run(ctx)
			stop() // one socket down stops the process: a supervisor restarts it whole
			done <- err
		}()
	}
	var errs []error
	for range servers {
		if err := <-done; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// serveKMS serves the KMS v2 API on ln until ctx is done.
func serveKMS(ctx context.Context, ln net.Listener, path string, svc *kmsplugin.Service, timeout time.Duration, logger klog.Logger) error {
	// k8s.io/kms's GRPCService answers the API; the server and its listener are ours, so that shutdown
	// cannot race with their start.
	server := grpc.NewServer(grpc.ConnectionTimeout(timeout))
	kmsapi.RegisterKeyManagementServiceServer(server, kmsservice.NewGRPCService(path, timeout, loggingService{Service: svc, log: logger}))
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", path, err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() {
		server.GracefulStop()
		close(stopped)
	}()
	timer := time.NewTimer(shutdownGrace)
	defer timer.Stop()
	select {
	case <-stopped:
	case <-timer.C:
		server.Stop()
		<-stopped
	}
	<-served
	_ = os.Remove(path)
	logger.Info("Stopped serving", "socket", path)
	return nil
}

// loggingBackend logs every failed call to the CA keys, and every key made and destroyed, to log
// (serve's): certapi sees only the answer.
type loggingBackend struct {
	keyplugin.Backend
	log klog.Logger
}

func (l loggingBackend) NewKey(ctx context.Context, label string) (string, crypto.PublicKey, error) {
	ref, pub, err := l.Backend.NewKey(ctx, label)
	if err != nil {
		l.log.Error(err, "NewKey failed", "label", label)
		return ref, pub, err
	}
	l.log.Info("Made a CA key", "label", label, "ref", ref)
	return ref, pub, nil
}

func (l loggingBackend) Sign(ctx context.Context, ref string, digest []byte, hash crypto.Hash) ([]byte, error) {
	sig, err := l.Backend.Sign(ctx, ref, digest, hash)
	if err != nil {
		l.log.Error(err, "Sign failed", "ref", ref)
		return nil, err
	}
	l.log.V(4).Info("Signed", "ref", ref, "hash", hash.String())
	return sig, nil
}

func (l loggingBackend) Destroy(ctx context.Context, ref string) error {
	err := l.Backend.Destroy(ctx, ref)
	switch {
	case errors.Is(err, keyplugin.ErrNotFound):
		l.log.Info("CA key already gone", "ref", ref)
	case err != nil:
		l.log.Error(err, "Destroy failed", "ref", ref)
	default:
		l.log.Info("Destroyed a CA key", "ref", ref)
	}
	return err
}

func (l loggingBackend) List(ctx context.Context, labelPrefix string) ([]keyplugin.KeyInfo, error) {
	keys, err := l.Backend.List(ctx, labelPrefix)
	if err != nil {
		l.log.Error(err, "List failed", "labelPrefix", labelPrefix)
	}
	return keys, err
}

func (l loggingBackend) Check(ctx context.Context) error {
	err := l.Backend.Check(ctx)
	if err != nil {
		l.log.Error(err, "Check failed")
	}
	return err
}

// loggingService logs every failed call to log (serve's): kube-apiserver and certapi log a failing plugin
// only at -v=2.
type loggingService struct {
	kmsservice.Service
	log klog.Logger
}

func (l loggingService) Encrypt(ctx context.Context, uid string, data []byte) (*kmsservice.EncryptResponse, error) {
	resp, err := l.Service.Encrypt(ctx, uid, data)
	if err != nil {
		l.log.Error(err, "Encrypt failed", "uid", uid)
	}
	return resp, err
}

func (l loggingService) Decrypt(ctx context.Context, uid string, req *kmsservice.DecryptRequest) ([]byte, error) {
	resp, err := l.Service.Decrypt(ctx, uid, req)
	if err != nil {
		l.log.Error(err, "Decrypt failed", "uid", uid, "keyID", req.KeyID)
	}
	return resp, err
}

func (l loggingService) Status(ctx context.Context) (*kmsservice.StatusResponse, error) {
	resp, err := l.Service.Status(ctx)
	if err != nil {
		l.log.Error(err, "Status failed")
	}
	return resp, err
}
