package injector

import (
	"context"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	"github.com/certapi/certapi/pkg/cabundle"
)

// Kind is a kind of object that can opt in to caBundle injection. Each kind has its own file, with
// its Kind constant, its kindSpec and its observe function.
type Kind string

// registry lists every kind that can opt in, in the order Summary reports them. Adding a kind is one
// file (its Kind constant, its kindSpec and its observe function) and one line here.
var registry = []*kindSpec{
	validatingWebhookConfigurations,
	mutatingWebhookConfigurations,
	customResourceDefinitions,
	apiServices,
	configMaps,
}

// Kinds lists the kinds, in the order Summary reports them.
var Kinds = func() []Kind {
	kinds := make([]Kind, len(registry))
	for n, s := range registry {
		kinds[n] = s.kind
	}
	return kinds
}()

// kindSpec describes one kind that can opt in.
type kindSpec struct {
	kind Kind
	// gvr is what the kind's metadata informer watches; its group and version are the apiVersion of
	// the Events about the kind's objects.
	gvr schema.GroupVersionResource
	// namespaced kinds have keys "<namespace>/<name>", as their informer's store has them; the others
	// are cluster-scoped and keyed by name.
	namespaced bool
	// newAccessor makes the kind's accessor from the injector's clients.
	newAccessor func(clientsets) accessor
}

// apiVersion is the apiVersion of the kind's objects.
func (s *kindSpec) apiVersion() string {
	return s.gvr.GroupVersion().String()
}

// clientsets are the clients an accessor may use. They share one rate limit and speak protobuf.
type clientsets struct {
	kube kubernetes.Interface
	ext  apiextensionsclient.Interface
	agg  aggregatorclient.Interface
}

// accessor reads and patches objects of one kind, in full, and returns what it read as an
// observation. name is the object's key: "<namespace>/<name>" for a namespaced kind. Apart from the metadata informers, which need only the kind's gvr, it is all the
// injector knows of a kind: everything else works on observations.
type accessor interface {
	get(ctx context.Context, name string) (*observation, error)
	// patch applies an RFC 6902 JSON patch under FieldManager and observes the response.
	patch(ctx context.Context, name string, patch []byte) (*observation, error)
}

// kindClient is a registered kind with its accessor, as an Injector uses it.
type kindClient struct {
	*kindSpec
	accessor
}

// newKindClients makes the accessor of every registered kind.
func newKindClients(c clientsets) map[Kind]*kindClient {
	kinds := make(map[Kind]*kindClient, len(registry))
	for _, s := range registry {
		kinds[s.kind] = &kindClient{kindSpec: s, accessor: s.newAccessor(c)}
	}
	return kinds
}

// typedClient is what an accessor needs of a generated clientset's typed client for objects of type T.
type typedClient[T any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	cabundle.Patcher[T]
}

// typedAccessor is the accessor of a kind with a generated typed client: the client, and the kind's
// observe function.
type typedAccessor[T any] struct {
	client  typedClient[T]
	observe func(T) *observation
}

// newTypedAccessor infers T from observe, so that a kind's file names only its typed client and its
// observe function.
func newTypedAccessor[T any](client typedClient[T], observe func(T) *observation) accessor {
	return typedAccessor[T]{client: client, observe: observe}
}

func (a typedAccessor[T]) get(ctx context.Context, name string) (*observation, error) {
	o, err := a.client.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return a.observe(o), nil
}

func (a typedAccessor[T]) patch(ctx context.Context, name string, patch []byte) (*observation, error) {
	o, err := cabundle.Patch(ctx, a.client, name, patch)
	if err != nil {
		return nil, err
	}
	return a.observe(o), nil
}

// namespacedAccessor is the accessor of a namespaced kind with a generated typed client: the client of
// a namespace, and the kind's observe function. Names are "<namespace>/<name>".
type namespacedAccessor[T any] struct {
	client  func(namespace string) typedClient[T]
	observe func(T) *observation
}

// newNamespacedAccessor infers T from observe, like newTypedAccessor; client is the clientset's
// per-namespace getter (e.g. CoreV1().ConfigMaps).
func newNamespacedAccessor[T any, C typedClient[T]](client func(namespace string) C, observe func(T) *observation) accessor {
	return namespacedAccessor[T]{client: func(ns string) typedClient[T] { return client(ns) }, observe: observe}
}

func (a namespacedAccessor[T]) get(ctx context.Context, key string) (*observation, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	return typedAccessor[T]{client: a.client(ns), observe: a.observe}.get(ctx, name)
}

func (a namespacedAccessor[T]) patch(ctx context.Context, key string, patch []byte) (*observation, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	return typedAccessor[T]{client: a.client(ns), observe: a.observe}.patch(ctx, name, patch)
}
