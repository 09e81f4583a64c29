// Package kmspkcs11cmd is the command line of certapi-kms-pkcs11, the KMS v2 plugin that encrypts with an
// AES key held in a PKCS#11 token: serving the plugin's gRPC API on a Unix socket, and create-key.
package kmspkcs11cmd

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	fs.StringVar(&o.keyLabel, "key-label", "", "CKA_LABEL of the AES key that encrypts. Keys under other labels still decrypt what they encrypted, while they exist in the token. Required.")
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
		timeout     time.Duration
		showVersion bool
	)
	cmd := &cobra.Command{
		Use:   Name,
		Short: "A Kubernetes KMS v2 plugin that encrypts with an AES key held in a PKCS#11 token (an HSM)",
		Long: Name + ` serves the Kubernetes KMS v2 plugin API (k8s.io/kms) on a Unix socket, for an
EncryptionConfiguration's kms provider (apiVersion: v2) in certapi or kube-apiserver.

Every encryption happens inside the token: AES-GCM (CKM_AES_GCM) under the AES key labelled --key-label,
with a random 96-bit IV per call stored beside the ciphertext and the key ID bound as additional
authenticated data. The key must be sensitive and not extractable; "` + Name + ` create-key" makes one.
The key ID reported to the API server is the RFC 7512 URI pkcs11:object=<label>;id=<CKA_ID>;type=secret-key:
it names the key, it is not the key. Decryption uses the key the stored key ID names, so after a rotation
(a new key under a new label, this plugin restarted with --key-label pointing at it) what the old key
encrypted still decrypts while the old key object exists in the token.

Status reports healthz "ok" only when the token encrypts and decrypts a probe under the current key.

The socket is made readable and writable by this process's user only: run the API server as the same
user (a sidecar in the same pod, sharing an emptyDir). Logs carry key IDs and PKCS#11 return codes, never
a key, a PIN or a plaintext.`,
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
			return serve(ctx, cfg, listen, timeout)
		},
	}
	cmd.CompletionOptions.DisableDefaultCmd = true
	tok.addFlags(cmd.PersistentFlags())
	cmd.Flags().StringVar(&listen, "listen", "/var/run/certapi-kms/kms.sock", "Unix socket to serve the KMS v2 API on (a path, or unix:///path): the endpoint of the EncryptionConfiguration's kms provider. A stale socket file there is removed.")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Second, "gRPC connection timeout.")
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

// serve opens the token, checks that the current key works, and serves the KMS v2 API on listen until ctx
// is done.
func serve(ctx context.Context, cfg pkcs11token.Config, listen string, timeout time.Duration) error {
	path := strings.TrimPrefix(listen, "unix://")
	if path == "" {
		return errors.New("--listen is empty")
	}
	t, err := pkcs11token.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer t.Close() //nolint:errcheck // nothing to do about it on the way out
	svc := kmsplugin.NewService(t)
	// Refuse to start with a key that cannot serve: better a clear exit than a plugin that answers
	// every call with the same error.
	status, err := svc.Status(ctx)
	if err != nil {
		return fmt.Errorf("checking the current key: %w", err)
	}
	if err := removeStaleSocket(path); err != nil {
		return err
	}
	// Only this user may connect: the socket is made under this mask.
	syscall.Umask(0o077)
	ln, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", path, err)
	}
	// k8s.io/kms's GRPCService answers the API; the server and its listener are ours, so that shutdown
	// cannot race with their start.
	server := grpc.NewServer(grpc.ConnectionTimeout(timeout))
	logger := klog.FromContext(ctx)
	kmsapi.RegisterKeyManagementServiceServer(server, kmsservice.NewGRPCService(path, timeout, loggingService{Service: svc, log: logger}))
	served := make(chan error, 1)
	go func() { served <- server.Serve(ln) }()
	logger.Info("Serving the KMS v2 API", "socket", path, "keyID", status.KeyID)
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

// removeStaleSocket removes a socket file left at path by an earlier run; anything else there is an error.
func removeStaleSocket(path string) error {
	info, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if info.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket; refusing to remove it", path)
	}
	// A live server there answers a dial: two plugins on one socket would take turns at random.
	if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
		_ = conn.Close()
		return fmt.Errorf("another process serves on %s", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing the stale socket %s: %w", path, err)
	}
	return nil
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
