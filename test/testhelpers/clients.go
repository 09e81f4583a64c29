package testhelpers

import (
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
)

// Clients returns a certapi clientset and a Kubernetes clientset for config.
func Clients(t testing.TB, config *rest.Config) (versioned.Interface, kubernetes.Interface) {
	t.Helper()
	c, err := versioned.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	k, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	return c, k
}
