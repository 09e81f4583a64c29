package signer

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The root an organisation keeps, made and used by openssl as such a root is.
const opensslRootConfig = `[req]
distinguished_name = dn
prompt = no
x509_extensions = v3_root
[dn]
O = Example Org
CN = Example Root
[v3_root]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
`

// An upstream's own profile for CA certificates, which ignores the request's
// extensions: a CA, but without name constraints or extended key usage.
const opensslProfileWithoutConstraints = `basicConstraints = critical,CA:TRUE,pathlen:0
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
`

// TestOpenSSLSignedIntermediate has openssl sign certapi's certificate
// request as an organisation's root would, and imports the result: with
// `-copy_extensions copyall` it is accepted, and a leaf the imported CA signs
// passes `openssl verify` against the root, and against certapi's
// intermediate alone with -partial_chain (see AnchorIntermediate); with
// `-copy_extensions none` and a profile without name constraints it is
// refused with every missing constraint listed.
func TestOpenSSLSignedIntermediate(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Fatalf("this test needs openssl on PATH (Debian package openssl): %v", err)
	}
	dir := t.TempDir()
	file := func(name string) string { return filepath.Join(dir, name) }
	write := func(name string, data []byte) {
		t.Helper()
		if err := os.WriteFile(file(name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(openssl, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("openssl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	read := func(name string) []byte {
		t.Helper()
		b, err := os.ReadFile(file(name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	write("root.cnf", []byte(opensslRootConfig))
	run("req", "-x509", "-config", file("root.cnf"), "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-384", "-nodes",
		"-keyout", file("root.key"), "-out", file("root.pem"), "-days", "3650")
	key := testKey(t, string(ECDSAP256))
	csr, err := IntermediateRequest(key, IntermediateOptions{ClusterDomain: "cluster.local", Organization: "Example Org"})
	if err != nil {
		t.Fatal(err)
	}
	write("certapi.csr", csr)

	t.Run("copy_extensions copyall", func(t *testing.T) {
		run("x509", "-req", "-in", file("certapi.csr"), "-CA", file("root.pem"), "-CAkey", file("root.key"),
			"-days", "365", "-copy_extensions", "copyall", "-out", file("copyall.pem"))
		// Read after openssl signed: its notBefore is the second it signed in, and the CA cannot sign before it.
		now := time.Now()
		opts := ImportOptions{ClusterDomain: "cluster.local", RootsPEM: read("root.pem"), Now: now}
		ca, warnings, err := CheckIntermediate(read("copyall.pem"), nil, key, opts)
		if err != nil {
			t.Fatalf("CheckIntermediate: %v", err)
		}
		if len(warnings) > 0 {
			t.Errorf("warnings for a certificate with every requested extension: %v", warnings)
		}
		leaf, err := ca.Sign(LeafRequest{ServiceName: "web", Namespace: "ns", ClusterDomain: "cluster.local",
			PublicKey: testKey(t, string(ECDSAP384)).Public(), Duration: time.Hour, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		served, err := ParseBundle(leaf.CertificatePEM)
		if err != nil {
			t.Fatal(err)
		}
		write("leaf.pem", bundleOf(served[0]))
		write("untrusted.pem", bundleOf(served[1:]...))
		write("intermediate.pem", ca.CertificatePEM())
		// A client of the root: the served chain leads to it.
		run("verify", "-purpose", "sslserver", "-verify_hostname", "web.ns.svc", "-CAfile", file("root.pem"), "-untrusted", file("untrusted.pem"), file("leaf.pem"))
		// A client that pins certapi's intermediate: OpenSSL needs -partial_chain, and refuses without it.
		run("verify", "-purpose", "sslserver", "-verify_hostname", "web.ns.svc", "-partial_chain", "-CAfile", file("intermediate.pem"), file("leaf.pem"))
		out, err := exec.Command(openssl, "verify", "-CAfile", file("intermediate.pem"), file("leaf.pem")).CombinedOutput()
		if err == nil {
			t.Errorf("openssl verify without -partial_chain accepted an intermediate as the anchor:\n%s", out)
		}
	})

	t.Run("copy_extensions none", func(t *testing.T) {
		write("profile.ext", []byte(opensslProfileWithoutConstraints))
		run("x509", "-req", "-in", file("certapi.csr"), "-CA", file("root.pem"), "-CAkey", file("root.key"),
			"-days", "365", "-copy_extensions", "none", "-extfile", file("profile.ext"), "-out", file("none.pem"))
		now := time.Now()
		_, _, err := CheckIntermediate(read("none.pem"), read("root.pem"), key, ImportOptions{ClusterDomain: "cluster.local", Now: now})
		var ie *IntermediateError
		if !errors.As(err, &ie) {
			t.Fatalf("CheckIntermediate error %v, want a refusal", err)
		}
		if len(ie.Problems) != 1 || ie.Problems[0].Reason != ReasonNameConstraints {
			t.Fatalf("problems %v, want only missing name constraints", ie.Problems)
		}
		for _, want := range []string{
			`permitted DNS subtree "svc" missing`, `permitted DNS subtree "svc.cluster.local" missing`,
			"excluded IP range 0.0.0.0/0 missing", "excluded IP range ::/0 missing",
			`permitted URI subtree "invalid" missing`, `excluded URI subtree "invalid" missing`,
			`permitted e-mail subtree "invalid" missing`, `excluded e-mail subtree "invalid" missing`,
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q not in %v", want, err)
			}
		}
		if !slices.Contains(reasons(ie.Warnings), ReasonExtKeyUsage) {
			t.Errorf("warnings %v, want the missing extended key usage among them", ie.Warnings)
		}
		// Told to accept wider constraints, it imports, and says what is missing.
		ca, warnings, err := CheckIntermediate(read("none.pem"), read("root.pem"), key, ImportOptions{ClusterDomain: "cluster.local", Now: now, AcceptWiderConstraints: true})
		if err != nil || ca == nil {
			t.Fatalf("CheckIntermediate with wider constraints accepted: %v", err)
		}
		if !strings.Contains(findingsText(warnings), `permitted DNS subtree "svc" missing`) {
			t.Errorf("warnings %v do not list the missing constraints", warnings)
		}
	})
}

func findingsText(fs []Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.String())
		b.WriteString("\n")
	}
	return b.String()
}
