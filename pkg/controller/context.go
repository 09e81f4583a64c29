package controller

import (
	"fmt"
	"sync"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	kubescheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned"
	"github.com/certapi/certapi/pkg/generated/informers/externalversions"
)

// EventScheme knows the Kubernetes types and certapi's versioned types, so that an Event can refer to a
// ServingCertRequest or the CertificateAuthority as well as to a Secret or a webhook configuration.
var EventScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntimeMust(kubescheme.AddToScheme(s))
	utilruntimeMust(certapiv1alpha1.AddToScheme(s))
	return s
}()

// RegardingCA is the CertificateAuthority an Event is about, by reference only: informer objects carry no
// kind, and the whole object has no place in an Event or a log line.
func RegardingCA(obj *certapiv1alpha1.CertificateAuthority) *certapiv1alpha1.CertificateAuthority {
	return &certapiv1alpha1.CertificateAuthority{
		TypeMeta:   metav1.TypeMeta{APIVersion: certapiv1alpha1.SchemeGroupVersion.String(), Kind: "CertificateAuthority"},
		ObjectMeta: metav1.ObjectMeta{Name: obj.Name, UID: obj.UID, ResourceVersion: obj.ResourceVersion},
	}
}

func utilruntimeMust(err error) {
	if err != nil {
		panic(err)
	}
}

// Factory is an informer factory a controller made for itself (one with a filter or transform of its
// own); the term starts it with the others and shuts it down at the end.
type Factory interface {
	Start(stopCh <-chan struct{})
	Shutdown()
}

// Context is what the controllers of one leadership term share: the clients, the certapi informer
// factory, the informer factories controllers add, and Event recorders from one broadcaster. A
// controller's constructor declares through it what the controller watches (Watch), whom it listens to
// (Listen) and the factories it made (AddFactory); RunTerm does the rest once for every controller (see
// term.go), so a term never runs half its controllers.
type Context struct {
	Clients
	// ClusterDomain is the cluster's DNS domain, the suffix of every fully qualified Service name.
	ClusterDomain string
	// CertapiInformers is the term's factory of certapi informers. Its transform drops what no
	// controller reads (managed fields, the issued certificate and bundle in a request's status).
	CertapiInformers externalversions.SharedInformerFactory

	broadcaster events.EventBroadcaster

	mu        sync.Mutex
	factories []Factory
	watches   []*handlerWatch
	listens   []listen
	// started is set when RunTerm begins: from then on nothing more can be declared, and RunTerm
	// refuses to run the term again.
	started bool
}

// Clients are the clients every term shares; the process makes them once.
type Clients struct {
	// Kube reaches kube-apiserver: Secrets, Events, webhook configurations, SubjectAccessReviews.
	Kube kubernetes.Interface
	// APIExtensions and Aggregator read and patch CRDs and APIServices (injection targets).
	APIExtensions apiextensionsclient.Interface
	Aggregator    aggregatorclient.Interface
	// Metadata reads any resource's metadata only; the injector's informers use it (CRDs are large).
	Metadata metadata.Interface
	// Certapi is certapi's own clientset, through this server's loopback.
	Certapi versioned.Interface
	// CertapiStorage, when set, feeds the term's ServingCertRequest and CertificateAuthority informers
	// from this server's own storage instead of through Certapi (see package listwatch): no object is
	// encoded, sent to this process over TLS and decoded again.
	CertapiStorage *CertapiListWatchers
}

// CertapiListWatchers list and watch certapi's own resources in this process, in their v1alpha1 types.
type CertapiListWatchers struct {
	ServingCertRequests    cache.ListerWatcher
	CertificateAuthorities cache.ListerWatcher
}

// NewContext makes a term's Context. broadcaster is the process's one Event broadcaster (started by
// its owner); each controller takes a recorder of its own name from it with Recorder.
func NewContext(clusterDomain string, clients Clients, broadcaster events.EventBroadcaster) *Context {
	c := &Context{
		Clients:          clients,
		ClusterDomain:    clusterDomain,
		CertapiInformers: externalversions.NewSharedInformerFactoryWithOptions(clients.Certapi, 0, externalversions.WithTransform(trimCertapi)),
		broadcaster:      broadcaster,
	}
	c.factories = append(c.factories, c.CertapiInformers)
	if lw := clients.CertapiStorage; lw != nil {
		// Registered before any controller asks, so the factory's typed informers and listers are these.
		useListerWatcher(c.CertapiInformers, &certapiv1alpha1.ServingCertRequest{}, lw.ServingCertRequests)
		useListerWatcher(c.CertapiInformers, &certapiv1alpha1.CertificateAuthority{}, lw.CertificateAuthorities)
	}
	return c
}

// useListerWatcher makes factory's informer of obj's type one that lists and watches with lw.
func useListerWatcher(factory externalversions.SharedInformerFactory, obj runtime.Object, lw cache.ListerWatcher) {
	if lw == nil {
		return
	}
	factory.InformerFor(obj, func(_ versioned.Interface, resync time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(lw, obj, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	})
}

// Recorder returns an Event recorder that reports as reportingController (e.g. certapi.dev/injector).
func (c *Context) Recorder(reportingController string) events.EventRecorder {
	return c.broadcaster.NewRecorder(EventScheme, reportingController)
}

// trimCertapi drops the parts of certapi's objects that no controller reads: managed fields; every
// label, annotation, finalizer and owner reference (writers choose them, up to
// validation.MaxUserMetadataBytes per object, and no controller looks at them on certapi's own objects:
// the keys certapi reads, such as certapi.dev/servingcertrequest, are on Secrets and PodCertificateRequests,
// never on a ServingCertRequest or the CertificateAuthority); and a request's issued certificate and bundle
// (most of its size). So 10,000 requests cost little, and a tenant's metadata costs the leader nothing.
// The maps are replaced, never changed in place: with the in-process list and watch (see
// CertapiListWatchers) they may be shared with the server's watch cache.
func trimCertapi(obj any) (any, error) {
	switch o := obj.(type) {
	case *certapiv1alpha1.ServingCertRequest:
		renew, asked := o.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt]
		trimMeta(&o.ObjectMeta)
		if asked {
			// The one annotation a controller reads: Secret delivery re-issues when it changes. A new map,
			// as the dropped one may be the watch cache's own.
			o.Annotations = map[string]string{certapiv1alpha1.AnnotationRenewRequestedAt: renew}
		}
		o.Status.Certificate = ""
		o.Status.CABundle = ""
	case *certapiv1alpha1.CertificateAuthority:
		trimMeta(&o.ObjectMeta)
	}
	return obj, nil
}

// trimMeta keeps what identifies an object and its lifecycle (name, namespace, UID, resourceVersion,
// generation, timestamps) and drops what its writers choose.
func trimMeta(m *metav1.ObjectMeta) {
	m.ManagedFields = nil
	m.Labels = nil
	m.Annotations = nil
	m.Finalizers = nil
	m.OwnerReferences = nil
}

// NewKubeClients makes the kube-apiserver clients of Clients from one config: typed, apiextensions
// and aggregator clients in protobuf (CRDs are large, and decoding JSON is most of the cost of reading
// one), and the metadata-only client. Certapi is left for the caller to set.
func NewKubeClients(cfg *rest.Config) (Clients, error) {
	var c Clients
	var err error
	if c.Metadata, err = metadata.NewForConfig(cfg); err != nil {
		return c, fmt.Errorf("creating the metadata client: %w", err)
	}
	protoCfg := rest.CopyConfig(cfg)
	protoCfg.ContentType = "application/vnd.kubernetes.protobuf"
	protoCfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if c.Kube, err = kubernetes.NewForConfig(protoCfg); err != nil {
		return c, fmt.Errorf("creating the kube-apiserver client: %w", err)
	}
	if c.APIExtensions, err = apiextensionsclient.NewForConfig(protoCfg); err != nil {
		return c, fmt.Errorf("creating the apiextensions client: %w", err)
	}
	if c.Aggregator, err = aggregatorclient.NewForConfig(protoCfg); err != nil {
		return c, fmt.Errorf("creating the aggregator client: %w", err)
	}
	return c, nil
}
