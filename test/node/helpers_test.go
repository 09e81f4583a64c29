package node

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/test/node/nodetest"
)

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return nodetest.Kubectl(t, cp, args...)
}

func kubectlErr(args ...string) (string, error) { return nodetest.KubectlErr(cp, args...) }

func pluginBinary(t *testing.T, name string) {
	t.Helper()
	nodetest.PluginBinary(t, name)
}

func kustomization(t *testing.T, base string, setImages map[string]string, extra string) string {
	t.Helper()
	return nodetest.Kustomization(t, base, setImages, extra)
}

func clients(t *testing.T) (kubernetes.Interface, versioned.Interface) {
	t.Helper()
	return nodetest.Clients(t, cp)
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	nodetest.WaitFor(t, timeout, what, cond)
}

func podsReady(ctx context.Context, kube kubernetes.Interface, ns, selector string, want int) (bool, string) {
	return nodetest.PodsReady(ctx, kube, ns, selector, want)
}
