package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/certapi/certapi/pkg/cmd/kubectlcertapi"
	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestKubectlCertapi runs `kubectl certapi` through the real kubectl against two certapi replicas with a
// short rotation grace: status, check, inspect secret, rotate --wait, distrust (refused, then --yes
// --wait), a leader handover seen by check, and check failing once certapi is gone.
func TestKubectlCertapi(t *testing.T) {
	own := framework.StartT(t, framework.Options{
		CertapiReplicas:    2,
		CertapiReplicaArgs: framework.LeaderIdentityArgs,
		CertapiArgs:        []string{"--rotation-grace=2s", "--max-certificate-duration=20s"},
	})
	c, kube := testhelpers.Clients(t, own.AdminConfig)
	ns := e2etest.Namespace(t, kube)
	run := newPluginRunnerFor(t, buildPluginNamed(t, "kubectl-certapi"), own.Kubeconfig).kubectl
	certapi := func(args ...string) pluginRun { t.Helper(); return run(append([]string{"certapi"}, args...)...) }
	old := e2etest.ActiveSerial(t, own)
	deliveredRequest(t, c, kube, ns, "web")

	t.Run("kubectl finds the plugin and its help", func(t *testing.T) {
		out := certapi("--help").succeeded(t).stdout
		for _, s := range []string{"kubectl certapi [command]", "status", "check", "rotate", "distrust", "inspect", "--kubeconfig"} {
			if !strings.Contains(out, s) {
				t.Errorf("--help lacks %q", s)
			}
		}
		certapi("nonsense").failedWith(t, `unknown command "nonsense" for "kubectl certapi"`)
	})

	var leader string
	t.Run("check, status.leader and the Leader column", func(t *testing.T) {
		res := certapi("check").succeeded(t)
		m := regexp.MustCompile(`(?m)^leader\s+ok\s+(certapi-[01]) leads$`).FindStringSubmatch(res.stdout)
		if m == nil {
			t.Fatalf("no leader line in:\n%s", res.stdout)
		}
		leader = m[1]
		for _, want := range []string{"API served            ok", "APIService            ok", "serving certificate   ok"} {
			if !strings.Contains(res.stdout, want) {
				t.Errorf("check lacks %q:\n%s", want, res.stdout)
			}
		}
		// Every replica names the same leader, in status.leader and in the table made from it: the proxy
		// in front of them alternates.
		for range 4 {
			out := run("get", "certificateauthority", "default", "-o", "jsonpath={.status.leader.state} {.status.leader.identity}").succeeded(t).stdout
			if out != "Elected "+leader {
				t.Fatalf("get status.leader: %q, want %q", out, "Elected "+leader)
			}
			out = run("get", "certificateauthorities", "-o", "jsonpath={.items[0].status.leader.identity}").succeeded(t).stdout
			if out != leader {
				t.Fatalf("list status.leader: %q, want %q", out, leader)
			}
			table := run("get", "certificateauthority", "default").succeeded(t).stdout
			if !regexp.MustCompile(`(?m)^NAME\s+READY\s+ROTATING\s+ACTIVE\s+NOT AFTER\s+LEADER\s+AGE$`).MatchString(table) ||
				!strings.Contains(table, " "+leader+" ") {
				t.Fatalf("kubectl get certificateauthority shows no LEADER %s:\n%s", leader, table)
			}
		}
		// The field is in the OpenAPI, with its states.
		explain := run("explain", "certificateauthority.status.leader").succeeded(t).stdout
		for _, want := range []string{"identity", "state", "Elected", "Unknown"} {
			if !strings.Contains(explain, want) {
				t.Errorf("kubectl explain certificateauthority.status.leader lacks %q:\n%s", want, explain)
			}
		}
		// A status write cannot forge it: the value written is dropped, and the answer is the election's.
		out := run("patch", "certificateauthority", "default", "--subresource=status", "--type=merge",
			"-p", `{"status":{"leader":{"state":"Elected","identity":"forged"}}}`, "-o", "jsonpath={.status.leader.identity}").succeeded(t).stdout
		if out != leader {
			t.Fatalf("a status patch of status.leader answered %q, want %q", out, leader)
		}
		if out := run("get", "certificateauthority", "default", "-o", "jsonpath={.status.leader.identity}").succeeded(t).stdout; out != leader {
			t.Fatalf("status.leader after a forged write: %q, want %q", out, leader)
		}
	})

	t.Run("status", func(t *testing.T) {
		out := certapi("status").succeeded(t).stdout
		// The targets: certapi's APIService and, where kube-apiserver serves them (Kubernetes 1.37 or
		// later), its ClusterTrustBundle.
		targets := 1
		if served, _ := testhelpers.Served(t, own.AdminConfig, "certificates.k8s.io/v1", "clustertrustbundles"); served {
			targets++
		}
		for _, want := range []string{"LEADER", leader, "Active   " + old, "Rotation: Idle", "waiting for nothing: the next rotation begins by itself",
			fmt.Sprintf("Injection: %d targets: %d up to date", targets, targets), "ServingCertRequests (all namespaces): 1, 0 not Ready", ns + "   web "} {
			if !strings.Contains(out, want) {
				t.Errorf("status lacks %q:\n%s", want, out)
			}
		}
		var r kubectlcertapi.Report
		if err := json.Unmarshal([]byte(certapi("status", "-o", "json").succeeded(t).stdout), &r); err != nil {
			t.Fatal(err)
		}
		if r.Leader == nil || r.Leader.Identity != leader || len(r.Certificates) != 1 || r.Certificates[0].SerialNumber != old ||
			r.Requests.Total != 1 || r.Requests.Secrets != 1 || r.Requests.SecretsFromActive != 1 || r.Requests.NearestExpiry[0].SignedBy != "Active" {
			t.Errorf("status -o json: %+v", r)
		}
		r = kubectlcertapi.Report{}
		if err := yaml.UnmarshalStrict([]byte(certapi("status", "-n", "default", "-o", "yaml").succeeded(t).stdout), &r); err != nil {
			t.Fatal(err)
		}
		if r.Requests.Scope != "namespace default" || r.Requests.Total != 0 {
			t.Errorf("status -n default: %+v", r.Requests)
		}
		certapi("status", "-o", "wide").failedWith(t, `allowed formats are: json,yaml`)
	})

	t.Run("inspect secret", func(t *testing.T) {
		out := certapi("inspect", "secret", "web-tls", "-n", ns).succeeded(t).stdout
		for _, want := range []string{"Delivered by:    ServingCertRequest " + ns + "/web", "DNS names:       web." + ns + ".svc, web." + ns + ".svc.cluster.local",
			"Signed by:       Active CA", "tls.key matches", "Verifies:        yes", "No problems found."} {
			if !strings.Contains(out, want) {
				t.Errorf("inspect lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "PRIVATE KEY") {
			t.Fatal("inspect printed the key")
		}
		var r kubectlcertapi.SecretInspection
		if err := json.Unmarshal([]byte(certapi("inspect", "secret", "web-tls", "-n", ns, "-o", "json").succeeded(t).stdout), &r); err != nil {
			t.Fatal(err)
		}
		if !r.Verified || !r.KeyMatches || r.Request != "web" || len(r.Problems) != 0 {
			t.Errorf("inspect -o json: %+v", r)
		}
		certapi("inspect", "secret", "missing", "-n", ns).failedWith(t, `secrets "missing" not found`)
	})

	t.Run("distrust refuses without --yes", func(t *testing.T) {
		res := certapi("distrust")
		res.failedWith(t, "distrust is the emergency path", "stop the Active CA "+old+" from signing", "Run it again with --yes")
		if got := e2etest.CAObject(t, c).Spec.Distrust; got != "" {
			t.Fatalf("spec.distrust = %q after a refusal", got)
		}
	})

	var rotated string
	t.Run("rotate --wait", func(t *testing.T) {
		res := certapi("rotate", "--wait", "--timeout=2m").succeeded(t)
		t.Logf("stdout:\n%s", res.stdout)
		m := regexp.MustCompile(`done: the new CA ([0-9a-f]+) signs`).FindStringSubmatch(res.stdout)
		if m == nil || m[1] == old {
			t.Fatalf("no new CA in:\n%s", res.stdout)
		}
		rotated = m[1]
		// The done line's summary is of the bundle the rotation waited for: every target held it, so
		// none is pending (it once read "0 of 4" in the second the switch reordered the bundle).
		d := regexp.MustCompile(`done: the new CA [0-9a-f]+ signs; injection: (\d+) of (\d+) targets hold the current bundle \((\d+) skipped, (\d+) in conflict`).FindStringSubmatch(res.stdout)
		if d == nil {
			t.Errorf("the done line has no injection summary:\n%s", res.stdout)
		} else if n := atoi(t, d[1]) + atoi(t, d[3]) + atoi(t, d[4]); n != atoi(t, d[2]) || n == 0 {
			t.Errorf("the done line counts pending targets: %q", d[0])
		}
		for _, want := range []string{"certificateauthority.certapi.dev/default patched: spec.forceRotation=kubectl-certapi-",
			"Rotating=True (NextPublished)", "Next CA " + rotated, "Active CA " + rotated, "Retiring CA " + old} {
			if !strings.Contains(res.stdout, want) {
				t.Errorf("rotate --wait lacks %q", want)
			}
		}
		if got := e2etest.CAObject(t, c).Status.Active.SerialNumber; got != rotated {
			t.Fatalf("Active is %s after rotate --wait, want %s", got, rotated)
		}
		out := certapi("inspect", "secret", "web-tls", "-n", ns).succeeded(t).stdout
		if !strings.Contains(out, "Verifies:        yes") {
			t.Errorf("after the rotation the Secret does not verify:\n%s", out)
		}
	})

	t.Run("distrust --yes --wait", func(t *testing.T) {
		res := certapi("distrust", "--yes", "--wait", "--timeout=2m").succeeded(t)
		t.Logf("stdout:\n%s", res.stdout)
		m := regexp.MustCompile(`done: CA ([0-9a-f]+) signs and every distrusted CA has left the bundle`).FindStringSubmatch(res.stdout)
		if m == nil || m[1] == rotated || m[1] == old {
			t.Fatalf("no new CA in:\n%s", res.stdout)
		}
		// The Rotating condition says Distrusted: the CA the rotation above retired is distrusted too.
		if !strings.Contains(res.stdout, "patched: spec.distrust=kubectl-certapi-") || !strings.Contains(res.stdout, "Active CA "+m[1]) ||
			!strings.Contains(res.stdout, "Rotating=True (Distrusted)") {
			t.Errorf("distrust --wait did not show its steps:\n%s", res.stdout)
		}
		// Every CA older than the new one left: the one that was Active and the one that was Retiring.
		for _, cert := range e2etest.CAObject(t, c).Status.Certificates {
			if cert.SerialNumber == rotated || cert.SerialNumber == old {
				t.Fatalf("the distrusted CA %s is still in the bundle: %+v", cert.SerialNumber, e2etest.CAObject(t, c).Status.Certificates)
			}
		}
		// The Secret was re-issued by the new CA before the distrusted one left.
		e2etest.Eventually(t, 30*time.Second, "inspect to show the Secret from the Active CA", func(context.Context) (bool, error) {
			out := certapi("inspect", "secret", "web-tls", "-n", ns).stdout
			return strings.Contains(out, "Signed by:       Active CA") && strings.Contains(out, "No problems found."), nil
		})
	})

	t.Run("check --wait across a leader handover", func(t *testing.T) {
		i := 0
		if leader == own.ReplicaName(1) {
			i = 1
		}
		if err := own.StopReplica(i); err != nil {
			t.Fatal(err)
		}
		res := certapi("check", "--wait", "--timeout=60s").succeeded(t)
		other := own.ReplicaName(1 - i)
		if !regexp.MustCompile(`(?m)^leader\s+ok\s+` + other + ` leads$`).MatchString(res.stdout) {
			t.Fatalf("check after %s stopped:\n%s\nstderr: %s", leader, res.stdout, res.stderr)
		}
		// status.leader follows the election, though the object did not change.
		if out := run("get", "certificateauthority", "default", "-o", "jsonpath={.status.leader.identity}").succeeded(t).stdout; out != other {
			t.Fatalf("status.leader after %s stopped: %q, want %q", leader, out, other)
		}
	})

	t.Run("check fails without certapi", func(t *testing.T) {
		if err := own.StopCertapi(); err != nil {
			t.Fatal(err)
		}
		res := certapi("check")
		res.failedWith(t, "error: certapi is not ready: API served")
		if !strings.Contains(res.stdout, "FAILED") {
			t.Errorf("stdout:\n%s", res.stdout)
		}
		certapi("check", "--wait", "--timeout=3s").failedWith(t, "after waiting 3s", "waiting: API served")
	})
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}
