package e2e

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/test/e2e/e2etest"
	"github.com/certapi/certapi/test/testhelpers"
)

// kubectl runs kubectl against the shared control plane and returns stdout; it fails the test on error.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := kubectlResult(t, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// kubectlResult runs kubectl against the shared control plane.
func kubectlResult(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return e2etest.Kubectl(t, cp.Kubeconfig, args...)
}

func TestKubectl(t *testing.T) {
	c, kube := testhelpers.Clients(t, cp.AdminConfig)
	ns := e2etest.Namespace(t, kube)

	if out := kubectl(t, "create", "-n", ns, "-f", testdata("servingcertrequest.yaml")); !strings.Contains(out, "servingcertrequest.certapi.dev/from-yaml created") {
		t.Fatalf("create -f: %q", out)
	}

	t.Run("get scr prints the columns", func(t *testing.T) {
		out := kubectl(t, "get", "scr", "-n", ns)
		header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
		want := []string{"NAME", "SERVICE", "READY", "NOT", "AFTER", "RENEWAL", "AGE"}
		if strings.Join(header, " ") != strings.Join(want, " ") {
			t.Fatalf("header %q, want %q\n%s", header, want, out)
		}
		if !strings.Contains(out, "from-yaml") || !strings.Contains(out, "my-webhook") {
			t.Fatalf("row missing:\n%s", out)
		}
		wide := kubectl(t, "get", "scr", "-n", ns, "-o", "wide")
		if !strings.Contains(wide, "REASON") || !strings.Contains(wide, "SECRET") {
			t.Fatalf("-o wide lacks REASON and SECRET:\n%s", wide)
		}
	})

	t.Run("get certapi lists the category", func(t *testing.T) {
		out := kubectl(t, "get", "certapi", "-n", ns, "-o", "name")
		if !strings.Contains(out, "servingcertrequest.certapi.dev/from-yaml") {
			t.Fatalf("category certapi: %q", out)
		}
	})

	t.Run("explain", func(t *testing.T) {
		out := kubectl(t, "explain", "servingcertrequest.spec")
		for _, s := range []string{"serviceName", "dnsNames", "renewBefore", "keyAlgorithm", "secretName", "DNS-1035"} {
			if !strings.Contains(out, s) {
				t.Fatalf("explain lacks %q:\n%s", s, out)
			}
		}
	})

	t.Run("server-side apply twice is a no-op the second time", func(t *testing.T) {
		kubectl(t, "apply", "--server-side", "-n", ns, "-f", testdata("applied.yaml"))
		first, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(context.Background(), "applied", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if first.Spec.KeyAlgorithm != "ECDSAP384" {
			t.Fatalf("applied keyAlgorithm %q", first.Spec.KeyAlgorithm)
		}
		var managed bool
		for _, m := range first.ManagedFields {
			if m.Manager == "kubectl" && m.Operation == metav1.ManagedFieldsOperationApply {
				managed = true
			}
		}
		if !managed {
			t.Fatalf("no Apply entry for manager kubectl in managedFields: %+v", first.ManagedFields)
		}
		kubectl(t, "apply", "--server-side", "-n", ns, "-f", testdata("applied.yaml"))
		second, err := c.CertapiV1alpha1().ServingCertRequests(ns).Get(context.Background(), "applied", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if second.ResourceVersion != first.ResourceVersion {
			t.Fatalf("second apply wrote: resourceVersion %s -> %s", first.ResourceVersion, second.ResourceVersion)
		}
	})

	t.Run("a rejected create shows the server's message", func(t *testing.T) {
		_, errOut, err := kubectlResult(t, "create", "-n", ns, "-f", testdata("invalid.yaml"))
		if err == nil {
			t.Fatal("kubectl create of an invalid request succeeded")
		}
		if !strings.Contains(errOut, "spec.duration") || !strings.Contains(errOut, "must be from 1h to 2160h") {
			t.Fatalf("stderr does not carry the server's field message: %q", errOut)
		}
	})

	t.Run("delete", func(t *testing.T) {
		if out := kubectl(t, "delete", "-n", ns, "-f", testdata("servingcertrequest.yaml")); !strings.Contains(out, `servingcertrequest.certapi.dev "from-yaml" deleted`) {
			t.Fatalf("delete: %q", out)
		}
		if out := kubectl(t, "get", "scr", "-n", ns, "-o", "name"); strings.Contains(out, "from-yaml") {
			t.Fatalf("still listed after delete: %q", out)
		}
	})
}
