//go:build cgo

package pkcs11token

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/pkcs11"

	"github.com/certapi/certapi/pkg/keyplugin"
	"github.com/certapi/certapi/pkg/signer"
)

// softHSMModules are where Debian's softhsm2 puts its PKCS#11 module (as test/framework looks for it).
var softHSMModules = []string{
	"/usr/lib/softhsm/libsofthsm2.so",
	"/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
}

const testPIN = "1234"

// softHSMToken initialises a SoftHSM2 token labelled label in a temporary directory, points
// SOFTHSM2_CONF at it for the rest of the test, and returns the Config that opens it. Without Debian's
// softhsm2 it skips the test on a developer's machine, and fails it in CI ($CI set), which installs it.
func softHSMToken(t *testing.T, label string) Config {
	t.Helper()
	missing := t.Skipf
	if os.Getenv("CI") != "" {
		missing = t.Fatalf
	}
	util, err := exec.LookPath("softhsm2-util")
	if err != nil {
		missing("softhsm2-util is not installed (Debian's softhsm2; .ci/run installs it)")
	}
	var module string
	for _, m := range softHSMModules {
		if _, err := os.Stat(m); err == nil {
			module = m
			break
		}
	}
	if module == "" {
		missing("SoftHSM2's PKCS#11 module is not at any of %v", softHSMModules)
	}
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.Mkdir(tokens, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "softhsm2.conf")
	if err := os.WriteFile(conf, []byte("directories.tokendir = "+tokens+"\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOFTHSM2_CONF", conf) // read by the module's C_Initialize, in this process too
	out, err := exec.Command(util, "--init-token", "--free", "--label", label, "--pin", testPIN, "--so-pin", "5678").CombinedOutput()
	if err != nil {
		t.Fatalf("softhsm2-util --init-token: %v\n%s", err, out)
	}
	return Config{Module: module, TokenLabel: label, PIN: testPIN}
}

// TestCAKeysSoftHSM makes, uses, lists and destroys CA keys in a SoftHSM2 token, directly and through the
// key plugin's handler and client, and checks what the token holds.
func TestCAKeysSoftHSM(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tok, err := Open(ctx, softHSMToken(t, "certapi-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Close() //nolint:errcheck // closed again below; the second close does nothing
	keys := tok.CAKeys()
	if err := keys.Check(ctx); err != nil {
		t.Fatalf("Check: %v", err)
	}

	ref, pub, err := keys.NewKey(ctx, "certapi-ca-test-1")
	if err != nil {
		t.Fatalf("NewKey: %v", err)
	}
	ecPub, ok := pub.(*ecdsa.PublicKey)
	if !ok {
		t.Fatalf("NewKey returned a %T public key", pub)
	}
	id, err := parseCARef(ref)
	if err != nil || len(id) != idSize {
		t.Fatalf("NewKey's reference %q: %x, %v; want a %d-byte CKA_ID", ref, id, err, idSize)
	}

	sum256 := sha256.Sum256([]byte("to be signed"))
	sum384 := sha512.Sum384([]byte("to be signed"))
	for _, tc := range []struct {
		digest []byte
		hash   crypto.Hash
	}{{sum256[:], crypto.SHA256}, {sum384[:], crypto.SHA384}} {
		sig, err := keys.Sign(ctx, ref, tc.digest, tc.hash)
		if err != nil {
			t.Fatalf("Sign(%v): %v", tc.hash, err)
		}
		if !ecdsa.VerifyASN1(ecPub, tc.digest, sig) {
			t.Errorf("the %v signature does not verify with the public key", tc.hash)
		}
	}

	t.Run("attributes", func(t *testing.T) {
		checkCAKeyObjects(t, tok, id, "certapi-ca-test-1")
	})

	t.Run("a session the token dropped", func(t *testing.T) {
		tok.mu.Lock()
		_ = tok.p.CloseSession(tok.session) // the handle do keeps is now invalid
		tok.mu.Unlock()
		if _, err := keys.Sign(ctx, ref, sum256[:], crypto.SHA256); err != nil {
			t.Fatalf("Sign after the session was closed underneath: %v", err)
		}
	})

	t.Run("through the key plugin", func(t *testing.T) {
		dir, err := os.MkdirTemp("", "p11kp")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		socket := filepath.Join(dir, "key.sock")
		ln, err := keyplugin.Listen(socket)
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx)
		served := make(chan error, 1)
		go func() { served <- keyplugin.ServeListener(sctx, ln, keyplugin.NewHandler(keys)) }()
		defer func() {
			stop()
			if err := <-served; err != nil {
				t.Errorf("ServeListener: %v", err)
			}
		}()
		c := keyplugin.NewClient(socket, 10*time.Second)
		if err := c.Check(ctx); err != nil {
			t.Fatalf("Check through the plugin: %v", err)
		}
		key, ref2, err := c.NewKey(ctx, "certapi-ca-test-2")
		if err != nil {
			t.Fatalf("NewKey through the plugin: %v", err)
		}
		ca, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local", Key: key})
		if err != nil {
			t.Fatalf("NewCA with the token's key: %v", err)
		}
		if err := ca.Certificate.CheckSignatureFrom(ca.Certificate); err != nil {
			t.Fatalf("the CA certificate the token signed does not verify: %v", err)
		}
		loaded, err := signer.LoadCAWithKey(ca.CertificatePEM(), c.Key(ref2, ca.Certificate.PublicKey))
		if err != nil {
			t.Fatalf("LoadCAWithKey: %v", err)
		}
		leafKey, err := signer.GenerateKey(signer.ECDSAP256)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := loaded.Sign(signer.LeafRequest{ServiceName: "svc", Namespace: "ns", ClusterDomain: "cluster.local", PublicKey: leafKey.Public(), Duration: time.Hour})
		if err != nil {
			t.Fatalf("signing a leaf with the token's key: %v", err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(ca.Certificate)
		if _, err := leaf.Certificate.Verify(x509.VerifyOptions{Roots: pool, DNSName: "svc.ns.svc"}); err != nil {
			t.Fatalf("the leaf does not verify: %v", err)
		}
		listed, err := c.List(ctx, "certapi-ca-test-")
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		got := map[string]string{}
		for _, k := range listed {
			got[k.Ref] = k.Label
		}
		if len(got) != 2 || got[ref] != "certapi-ca-test-1" || got[ref2] != "certapi-ca-test-2" {
			t.Errorf("List(certapi-ca-test-) = %v; want both keys", listed)
		}
		if listed, err := c.List(ctx, "other-"); err != nil || len(listed) != 0 {
			t.Errorf("List(other-) = %v, %v; want none", listed, err)
		}
		if err := c.Destroy(ctx, ref2); err != nil {
			t.Fatalf("Destroy through the plugin: %v", err)
		}
		if err := c.Destroy(ctx, ref2); err != nil {
			t.Fatalf("Destroy through the plugin, again: %v", err)
		}
		_, err = c.Key(ref2, ca.Certificate.PublicKey).Sign(nil, sum256[:], crypto.SHA256)
		if !errors.Is(err, keyplugin.ErrNotFound) {
			t.Errorf("Sign through the plugin after Destroy: %v; want keyplugin.ErrNotFound", err)
		}
	})

	if err := keys.Destroy(ctx, ref); err != nil {
		t.Fatalf("Destroy: %v", err)
	}
	if err := keys.Destroy(ctx, ref); !errors.Is(err, keyplugin.ErrNotFound) {
		t.Errorf("Destroy again: %v; want keyplugin.ErrNotFound", err)
	}
	if _, err := keys.Sign(ctx, ref, sum256[:], crypto.SHA256); !errors.Is(err, keyplugin.ErrNotFound) {
		t.Errorf("Sign after Destroy: %v; want keyplugin.ErrNotFound", err)
	}
	if err := tok.do(ctx, func(s pkcs11.SessionHandle) error {
		for _, class := range []uint{pkcs11.CKO_PRIVATE_KEY, pkcs11.CKO_PUBLIC_KEY} {
			if found, err := tok.findAll(s, ecKeyTemplate(class, id)); err != nil || len(found) != 0 {
				t.Errorf("after Destroy the token holds %d objects of class %d with the key's CKA_ID (%v)", len(found), class, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := keys.Sign(ctx, "pkcs11:object=x", sum256[:], crypto.SHA256); !errors.Is(err, keyplugin.ErrInvalidRequest) {
		t.Errorf("Sign with a foreign reference: %v; want keyplugin.ErrInvalidRequest", err)
	}

	if err := tok.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Check": keys.Check(ctx),
		"Sign": func() error {
			_, err := keys.Sign(ctx, formatCARef(id), sum256[:], crypto.SHA256)
			return err
		}(),
		"NewKey": func() error { _, _, err := keys.NewKey(ctx, "x"); return err }(),
	} {
		if !errors.Is(err, keyplugin.ErrUnavailable) {
			t.Errorf("%s on a closed token: %v; want keyplugin.ErrUnavailable", name, err)
		}
	}
}

// checkCAKeyObjects reads the key pair with CKA_ID id from the token and checks that the private half
// cannot leave it and may only sign, and that both halves carry the label and ID.
func checkCAKeyObjects(t *testing.T, tok *Token, id []byte, label string) {
	t.Helper()
	err := tok.do(context.Background(), func(s pkcs11.SessionHandle) error {
		priv, err := tok.findAll(s, ecKeyTemplate(pkcs11.CKO_PRIVATE_KEY, id))
		if err != nil {
			return err
		}
		pub, err := tok.findAll(s, ecKeyTemplate(pkcs11.CKO_PUBLIC_KEY, id))
		if err != nil {
			return err
		}
		if len(priv) != 1 || len(pub) != 1 {
			t.Fatalf("the token holds %d private and %d public EC keys with the CKA_ID; want one of each", len(priv), len(pub))
		}
		want := map[uint]bool{
			pkcs11.CKA_TOKEN: true, pkcs11.CKA_PRIVATE: true, pkcs11.CKA_SENSITIVE: true, pkcs11.CKA_ALWAYS_SENSITIVE: true,
			pkcs11.CKA_EXTRACTABLE: false, pkcs11.CKA_NEVER_EXTRACTABLE: true, pkcs11.CKA_SIGN: true,
			pkcs11.CKA_DECRYPT: false, pkcs11.CKA_UNWRAP: false, pkcs11.CKA_DERIVE: false,
		}
		template := []*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_LABEL, nil), pkcs11.NewAttribute(pkcs11.CKA_EC_PARAMS, nil)}
		for a := range want {
			template = append(template, pkcs11.NewAttribute(a, nil))
		}
		attrs, err := tok.p.GetAttributeValue(s, priv[0], template)
		if err != nil {
			return err
		}
		for _, a := range attrs {
			switch a.Type {
			case pkcs11.CKA_LABEL:
				if string(a.Value) != label {
					t.Errorf("the private key's CKA_LABEL is %q, want %q", a.Value, label)
				}
			case pkcs11.CKA_EC_PARAMS:
				if !bytes.Equal(a.Value, p256Params) {
					t.Errorf("the private key's CKA_EC_PARAMS is %x, want P-256's %x", a.Value, p256Params)
				}
			default:
				if got := len(a.Value) == 1 && a.Value[0] != 0; got != want[a.Type] {
					t.Errorf("the private key's attribute 0x%x is %v, want %v", a.Type, got, want[a.Type])
				}
			}
		}
		_, err = tok.p.GetAttributeValue(s, priv[0], []*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_VALUE, nil)})
		if !isCode(err, pkcs11.CKR_ATTRIBUTE_SENSITIVE) {
			t.Errorf("reading the private key's CKA_VALUE: %v; want CKR_ATTRIBUTE_SENSITIVE", err)
		}
		attrs, err = tok.p.GetAttributeValue(s, pub[0], []*pkcs11.Attribute{pkcs11.NewAttribute(pkcs11.CKA_LABEL, nil), pkcs11.NewAttribute(pkcs11.CKA_VERIFY, nil)})
		if err != nil {
			return err
		}
		if string(attrs[0].Value) != label || !bytes.Equal(attrs[1].Value, []byte{1}) {
			t.Errorf("the public key has CKA_LABEL %q and CKA_VERIFY %x; want %q and true", attrs[0].Value, attrs[1].Value, label)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
