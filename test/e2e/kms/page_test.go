package kms

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certapi/certapi/test/docs/markdown"
	"github.com/certapi/certapi/test/framework"
)

// securityPage is the page whose block "kms-pkcs11" makes the key and runs the plugin.
const securityPage = "docs/security.md"

// TestSecurityPageKMSCommands runs the two commands of docs/security.md's block "kms-pkcs11" as written,
// on a SoftHSM2 token labelled as the page's, with only the machine's paths replaced: the module where
// this machine has it, and the PIN file and socket in a temporary directory instead of /etc and /var/run
// (which need root and would outlive the test). create-key must print the key's ID, and the plugin
// started with the page's flags must answer Status with that key, healthy.
func TestSecurityPageKMSCommands(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	commands, env, dir, socket := pageCommands(ctx, t, securityPage, "kms-pkcs11", "/var/run/kmsplugin/kms.sock")
	if len(commands) != 2 || !strings.HasPrefix(commands[0], "certapi-kms-pkcs11 create-key ") || !strings.HasPrefix(commands[1], "certapi-kms-pkcs11 ") {
		t.Fatalf("the kms-pkcs11 block is not `certapi-kms-pkcs11 create-key ...` then `certapi-kms-pkcs11 ...`:\n%s", strings.Join(commands, "\n"))
	}

	create := exec.CommandContext(ctx, "bash", "-e", "-c", commands[0])
	create.Env = env
	out, err := create.Output()
	if err != nil {
		t.Fatalf("%s: %v", commands[0], err)
	}
	keyID := strings.TrimSpace(string(out))
	if !strings.HasPrefix(keyID, "pkcs11:object=certapi-kek-1;") {
		t.Fatalf("create-key printed %q; want the key's ID, pkcs11:object=certapi-kek-1;...", keyID)
	}

	proc, err := framework.StartProcess("certapi-kms-pkcs11", filepath.Join(dir, "plugin.log"), "bash", []string{"-c", "exec " + commands[1]}, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop(5 * time.Second) })
	plugin := &framework.KMSPlugin{Socket: socket, Process: proc}
	err = framework.PollUntil(ctx, 100*time.Millisecond, time.Minute, "the page's plugin to answer Status", []*framework.Process{proc}, func(ctx context.Context) (bool, string) {
		status, err := plugin.Status(ctx)
		if err != nil {
			return false, err.Error()
		}
		return status.Healthz == "ok" && status.KeyId == keyID, "healthz " + status.Healthz + ", key " + status.KeyId
	})
	if err != nil {
		t.Fatal(err)
	}
}

// custodyPage is the page whose block "key-plugin" runs the plugin that holds certapi's CA keys.
const custodyPage = "docs/ca-custody.md"

// TestCustodyPageKeyPlugin runs the command of docs/ca-custody.md's block "key-plugin" as written, on a
// SoftHSM2 token labelled as the page's, with only the machine's paths replaced (the module, and the PIN
// file and socket in a temporary directory): the plugin must serve the CA keys on the page's socket alone,
// and make and sign with a key there.
func TestCustodyPageKeyPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	commands, env, dir, socket := pageCommands(ctx, t, custodyPage, "key-plugin", "/var/run/certapi-keys/keys.sock")
	if len(commands) != 1 || !strings.HasPrefix(commands[0], "certapi-kms-pkcs11 ") {
		t.Fatalf("the key-plugin block is not one `certapi-kms-pkcs11 ...` command:\n%s", strings.Join(commands, "\n"))
	}
	proc, err := framework.StartProcess("certapi-kms-pkcs11", filepath.Join(dir, "plugin.log"), "bash", []string{"-c", "exec " + commands[0]}, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Stop(5 * time.Second) })
	plugin := &framework.KMSPlugin{CAKeySocket: socket, Process: proc}
	err = framework.PollUntil(ctx, 100*time.Millisecond, time.Minute, "the page's plugin to serve the CA keys", []*framework.Process{proc}, func(ctx context.Context) (bool, string) {
		if err := plugin.KeyClient().Check(ctx); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	if err != nil {
		t.Fatal(err)
	}
	key, ref, err := plugin.KeyClient().NewKey(ctx, "certapi-ca-page-test")
	if err != nil {
		t.Fatalf("making a key through the page's plugin: %v", err)
	}
	digest := sha256.Sum256([]byte("page"))
	sig, err := key.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil || !ecdsa.VerifyASN1(key.Public().(*ecdsa.PublicKey), digest[:], sig) {
		t.Fatalf("signing with %s through the page's plugin: %v", ref, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kms.sock")); err == nil {
		t.Error("with --listen=\"\" the plugin serves a KMS socket too")
	}
}

// pageCommands returns the commands of page's shell block name, with the machine's paths in place of the
// page's: the PKCS#11 module where this machine has it, and the PIN file and the socket (socketOnPage) in a
// directory of the test's with a SoftHSM2 token labelled certapi, as the pages' is. env runs them: the
// token's configuration, and the plugin, built by the test when $CERTAPI_KMS_PKCS11_BIN names none, first
// on PATH under the name the pages use.
func pageCommands(ctx context.Context, t *testing.T, page, name, socketOnPage string) (commands, env []string, dir, socket string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	block, err := markdown.BlockBody(filepath.Join(root, page), name)
	if err != nil {
		t.Fatal(err)
	}
	dir, hsm := tokenDir(t, "kmsdoc-")
	bin, err := framework.KMSPluginBinary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(bin) != "certapi-kms-pkcs11" {
		t.Fatalf("the plugin binary is %s; the pages run it as certapi-kms-pkcs11", bin)
	}
	socket = filepath.Join(dir, filepath.Base(socketOnPage))
	for onPage, here := range map[string]string{
		"/usr/lib/softhsm/libsofthsm2.so": hsm.Module,
		"/etc/certapi-kms/pin":            hsm.PINFile,
		socketOnPage:                      socket,
	} {
		if !strings.Contains(block, onPage) {
			t.Fatalf("%s's block %s no longer names %s; the test replaces it with its own path:\n%s", page, name, onPage, block)
		}
		block = strings.ReplaceAll(block, onPage, here)
	}
	commands = strings.Split(strings.TrimSpace(strings.ReplaceAll(block, "\\\n", " ")), "\n")
	return commands, append(hsm.Env(), "PATH="+filepath.Dir(bin)+":"+os.Getenv("PATH")), dir, socket
}
