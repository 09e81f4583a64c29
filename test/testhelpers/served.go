package testhelpers

import (
	"os"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// NotServedPrefix starts the message of every test skipped by SkipUnlessServed: `make test-matrix`
// (hack/matrix) reads it as "this Kubernetes minor lacks the API; certapi leaves the feature off".
const NotServedPrefix = "not served: "

// EnvKubeMinor names the Kubernetes minor whose kube-apiserver the tests run instead of the newest one that
// `make tools` builds (test/framework's EnvKubeMinor says how; `make test-matrix` sets it).
const EnvKubeMinor = "KUBE_MINOR"

// Served reports whether the kube-apiserver of config serves resource in groupVersion (e.g.
// "certificates.k8s.io/v1", "podcertificaterequests"), and its version.
func Served(t testing.TB, config *rest.Config, groupVersion, resource string) (served bool, version string) {
	t.Helper()
	d, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	v, err := d.ServerVersion()
	if err != nil {
		t.Fatalf("reading kube-apiserver's version: %v", err)
	}
	list, err := d.ServerResourcesForGroupVersion(groupVersion)
	if apierrors.IsNotFound(err) {
		return false, v.GitVersion
	}
	if err != nil {
		t.Fatalf("discovering %s: %v", groupVersion, err)
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, v.GitVersion
		}
	}
	return false, v.GitVersion
}

// SkipUnlessServed skips t when the kube-apiserver of config does not serve resource in groupVersion: a
// test of a feature that needs an API an older Kubernetes minor lacks (certapi finds that out and leaves
// the feature off; TestMissingAPIsAreReported checks that it says so). The message starts with
// NotServedPrefix and names the server's version. Against the newest minor, make test's, which serves
// every API certapi uses, a missing API is a failure, never a skip.
func SkipUnlessServed(t testing.TB, config *rest.Config, groupVersion, resource string) {
	t.Helper()
	if served, version := Served(t, config, groupVersion, resource); !served {
		if os.Getenv(EnvKubeMinor) == "" {
			t.Fatalf("kube-apiserver %s serves no %s %s, though the newest Kubernetes does (no %s: this is not an older minor of make test-matrix)", version, groupVersion, resource, EnvKubeMinor)
		}
		t.Skipf("%skube-apiserver %s serves no %s %s", NotServedPrefix, version, groupVersion, resource)
	}
}
