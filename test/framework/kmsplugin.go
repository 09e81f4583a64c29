package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	kmsapi "k8s.io/kms/apis/v2"

	"github.com/certapi/certapi/pkg/keyplugin"
)

// EnvKMSPluginBin names a prebuilt certapi-kms-pkcs11 (make build puts one in _output/bin); when it is not
// set, KMSPluginBinary builds one.
const EnvKMSPluginBin = "CERTAPI_KMS_PKCS11_BIN"

// softHSMModules are where Debian's softhsm2 (libsofthsm2) puts its PKCS#11 module, newest layout first.
var softHSMModules = []string{
	"/usr/lib/softhsm/libsofthsm2.so",
	"/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
}

// kmsPluginBuild remembers a successful build for the life of the process, as certapiBuild does.
var kmsPluginBuild struct {
	mu   sync.Mutex
	path string
}

// KMSPluginBinary returns the certapi-kms-pkcs11 binary to run: $CERTAPI_KMS_PKCS11_BIN if set, otherwise
// <repo>/_output/cache/certapi-kms-pkcs11 built once per process with cgo (CGO_ENABLED=1 -trimpath), which
// loading a PKCS#11 module needs; the Go build cache makes a rebuild of unchanged sources a no-op.
func KMSPluginBinary(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvKMSPluginBin); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvKMSPluginBin, p, err)
		}
		return p, nil
	}
	kmsPluginBuild.mu.Lock()
	defer kmsPluginBuild.mu.Unlock()
	if kmsPluginBuild.path != "" {
		return kmsPluginBuild.path, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cacheDir := filepath.Join(root, "_output", "cache")
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("creating %s: %w", cacheDir, err)
	}
	lock, err := os.OpenFile(filepath.Join(cacheDir, "certapi-kms-pkcs11.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("opening build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck // released on close anyway

	out := filepath.Join(cacheDir, "certapi-kms-pkcs11")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/certapi-kms-pkcs11")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("CGO_ENABLED=1 go build ./cmd/certapi-kms-pkcs11 in %s (it needs a C compiler): %w\n%s", root, err, buf.String())
	}
	kmsPluginBuild.path = out
	return out, nil
}

// SoftHSM is a SoftHSM2 token of its own: a configuration and a token directory under Dir, initialised with
// a label and a user PIN. Every process that uses it needs Env.
type SoftHSM struct {
	// Dir holds the configuration, the token directory and the PIN file.
	Dir string
	// Module is the path of SoftHSM2's PKCS#11 module.
	Module string
	// TokenLabel is the token's label.
	TokenLabel string
	// PINFile holds the user PIN.
	PINFile string
	conf    string
}

// SoftHSMModule returns the path of SoftHSM2's PKCS#11 module on this machine.
func SoftHSMModule() (string, error) {
	for _, m := range softHSMModules {
		if _, err := os.Stat(m); err == nil {
			return m, nil
		}
	}
	return "", fmt.Errorf("SoftHSM2's PKCS#11 module is not at any of %v: install Debian's softhsm2 (.ci/run does)", softHSMModules)
}

// NewSoftHSM initialises a SoftHSM2 token labelled label in dir (created if missing) with
// softhsm2-util --init-token, from Debian's softhsm2 (.ci/run installs it).
func NewSoftHSM(ctx context.Context, dir, label string) (*SoftHSM, error) {
	return NewSoftHSMTokens(ctx, dir, filepath.Join(dir, "tokens"), label)
}

// NewSoftHSMTokens is NewSoftHSM with the token's files in tokens instead of dir/tokens: on a volume that
// pods mount, whose processes find them through a configuration of their own.
func NewSoftHSMTokens(ctx context.Context, dir, tokens, label string) (*SoftHSM, error) {
	util, err := hostBinary("softhsm2-util", "softhsm2")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	h := &SoftHSM{Dir: dir, TokenLabel: label, PINFile: filepath.Join(dir, "pin"), conf: filepath.Join(dir, "softhsm2.conf")}
	if h.Module, err = SoftHSMModule(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(tokens, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", tokens, err)
	}
	conf := fmt.Sprintf("directories.tokendir = %s\nobjectstore.backend = file\nlog.level = INFO\nslots.removable = false\n", tokens)
	if err := os.WriteFile(h.conf, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", h.conf, err)
	}
	const pin, soPIN = "1234", "5678" // a test token's
	if err := os.WriteFile(h.PINFile, []byte(pin+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", h.PINFile, err)
	}
	cmd := exec.CommandContext(ctx, util, "--init-token", "--free", "--label", label, "--pin", pin, "--so-pin", soPIN)
	cmd.Env = h.Env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("softhsm2-util --init-token: %w\n%s", err, out)
	}
	return h, nil
}

// Env is the environment of a process that uses the token: the parent's with SOFTHSM2_CONF set.
func (h *SoftHSM) Env() []string {
	return append(os.Environ(), "SOFTHSM2_CONF="+h.conf)
}

// TokenArgs are certapi-kms-pkcs11's flags for the token and the AES key labelled keyLabel (no
// --key-label when keyLabel is empty: a plugin that serves only the CA keys needs none).
func (h *SoftHSM) TokenArgs(keyLabel string) []string {
	args := []string{"--module=" + h.Module, "--token-label=" + h.TokenLabel, "--pin-file=" + h.PINFile}
	if keyLabel != "" {
		args = append(args, "--key-label="+keyLabel)
	}
	return args
}

// CreateKey makes an AES key labelled keyLabel in the token with `certapi-kms-pkcs11 create-key` and
// returns its KMS key ID.
func (h *SoftHSM) CreateKey(ctx context.Context, keyLabel string) (string, error) {
	bin, err := KMSPluginBinary(ctx)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, bin, append([]string{"create-key"}, h.TokenArgs(keyLabel)...)...)
	cmd.Env = h.Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("certapi-kms-pkcs11 create-key %s: %w\n%s", keyLabel, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// PluginOptions says what a certapi-kms-pkcs11 started by StartPlugin serves.
type PluginOptions struct {
	// KMSKeyLabel is the label of the AES key of the KMS v2 API, served on KMSSocket; an empty KMSSocket
	// serves no KMS v2 API (--listen="").
	KMSKeyLabel, KMSSocket string
	// CAKeySocket is where the CA keys are served (--ca-key-socket, pkg/keyplugin); empty serves none.
	CAKeySocket string
}

// KMSPlugin is a running certapi-kms-pkcs11 serving a SoftHSM token's keys: the KMS v2 API on Socket,
// certapi's CA keys on CAKeySocket, or both. Restart replaces its Process: do not use it from other
// goroutines meanwhile.
type KMSPlugin struct {
	// Socket is the Unix socket of the KMS v2 API (empty when it serves none); the kms provider's
	// endpoint is "unix://" + Socket.
	Socket string
	// CAKeySocket is the Unix socket of the CA keys (empty when it serves none): certapi's key plugin
	// socket, which keyplugin.NewClient takes.
	CAKeySocket string
	*Process

	// What Restart starts again; empty for a KMSPlugin made by hand around a Process.
	bin, logPath string
	args, env    []string
}

// StartKMSPlugin starts certapi-kms-pkcs11 for the key labelled keyLabel on socket, logging to logPath, and
// waits until it answers Status with healthz "ok".
func StartKMSPlugin(ctx context.Context, h *SoftHSM, keyLabel, socket, logPath string) (*KMSPlugin, error) {
	return StartPlugin(ctx, h, PluginOptions{KMSKeyLabel: keyLabel, KMSSocket: socket}, logPath)
}

// StartKeyPlugin starts certapi-kms-pkcs11 serving only the CA keys of h's token on socket
// (--listen="" --ca-key-socket=socket), logging to logPath, and waits until it answers that the token is
// usable.
func StartKeyPlugin(ctx context.Context, h *SoftHSM, socket, logPath string) (*KMSPlugin, error) {
	return StartPlugin(ctx, h, PluginOptions{CAKeySocket: socket}, logPath)
}

// StartPlugin starts certapi-kms-pkcs11 serving what opts says on h's token, logging to logPath, and
// waits until each socket answers: the KMS v2 API's Status with healthz "ok", the CA keys' health 200.
func StartPlugin(ctx context.Context, h *SoftHSM, opts PluginOptions, logPath string) (*KMSPlugin, error) {
	if opts.KMSSocket == "" && opts.CAKeySocket == "" {
		return nil, errors.New("StartPlugin: give a KMS socket, a CA key socket, or both")
	}
	bin, err := KMSPluginBinary(ctx)
	if err != nil {
		return nil, err
	}
	args := h.TokenArgs(opts.KMSKeyLabel)
	args = append(args, "--listen="+opts.KMSSocket)
	if opts.CAKeySocket != "" {
		args = append(args, "--ca-key-socket="+opts.CAKeySocket)
	}
	args = append(args, "-v=4")
	p := &KMSPlugin{Socket: opts.KMSSocket, CAKeySocket: opts.CAKeySocket, bin: bin, logPath: logPath, args: args, env: h.Env()}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// start starts the process and waits until every socket it serves answers.
func (p *KMSPlugin) start(ctx context.Context) error {
	proc, err := StartProcess("certapi-kms-pkcs11", p.logPath, p.bin, p.args, p.env)
	if err != nil {
		return err
	}
	p.Process = proc
	err = PollUntil(ctx, pollInterval, time.Minute, "certapi-kms-pkcs11 to answer on its sockets", []*Process{proc}, func(ctx context.Context) (bool, string) {
		if p.Socket != "" {
			status, err := p.Status(ctx)
			if err != nil {
				return false, "KMS Status: " + err.Error()
			}
			if status.Healthz != "ok" {
				return false, "KMS healthz " + status.Healthz
			}
		}
		if p.CAKeySocket != "" {
			if err := p.KeyClient().Check(ctx); err != nil {
				return false, "CA keys: " + err.Error()
			}
		}
		return true, ""
	})
	if err != nil {
		_ = proc.Stop(5 * time.Second)
		return err
	}
	return nil
}

// Restart starts the plugin again with the same flags, after Kill or Stop, and waits until it answers as
// StartPlugin does: the plugin back after an outage. Its log goes on in the same file.
func (p *KMSPlugin) Restart(ctx context.Context) error {
	if p.bin == "" {
		return errors.New("this certapi-kms-pkcs11 was not started by StartPlugin; there is nothing to restart")
	}
	if done, _ := p.Exited(); !done {
		return fmt.Errorf("certapi-kms-pkcs11 (pid %d) is still running: Kill or Stop it first", p.Pid())
	}
	return p.start(ctx)
}

// KeyClient returns a client of the CA keys on CAKeySocket, with a 10-second timeout: the client certapi
// uses. It does no I/O.
func (p *KMSPlugin) KeyClient() *keyplugin.Client {
	return keyplugin.NewClient(p.CAKeySocket, 10*time.Second)
}

// ListCAKeys lists the token's CA keys whose label starts with labelPrefix, through the running plugin:
// what a test checks to see that a CA's key was made, or destroyed, in the token.
func (p *KMSPlugin) ListCAKeys(ctx context.Context, labelPrefix string) ([]keyplugin.KeyInfo, error) {
	if p.CAKeySocket == "" {
		return nil, errors.New("this certapi-kms-pkcs11 serves no CA keys (started without a CA key socket)")
	}
	return p.KeyClient().List(ctx, labelPrefix)
}

// Status calls the plugin's Status over its socket.
func (p *KMSPlugin) Status(ctx context.Context) (*kmsapi.StatusResponse, error) {
	conn, err := p.Dial()
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return kmsapi.NewKeyManagementServiceClient(conn).Status(ctx, &kmsapi.StatusRequest{})
}

// Dial returns a gRPC client connection to the plugin's socket, as kube-apiserver makes one.
func (p *KMSPlugin) Dial() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+p.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithAuthority("localhost"))
	if err != nil {
		return nil, fmt.Errorf("connecting to %s: %w", p.Socket, err)
	}
	return conn, nil
}

// Kill kills the plugin with SIGKILL, as a crash or an OOM kill would, and waits for it to exit. Its
// socket file stays behind, as after a crash.
func (p *KMSPlugin) Kill() error {
	if done, _ := p.Exited(); done {
		return errors.New("certapi-kms-pkcs11 has already exited")
	}
	if err := syscall.Kill(-p.Pid(), syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing certapi-kms-pkcs11: %w", err)
	}
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case <-p.Done():
		return nil
	case <-timer.C:
		return fmt.Errorf("certapi-kms-pkcs11 (pid %d) did not exit after SIGKILL", p.Pid())
	}
}
