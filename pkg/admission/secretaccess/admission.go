// Package secretaccess is the admission plugin that guards spec.secretName: asking certapi to deliver a
// private key into a Secret is asking it to create or overwrite that Secret, so the requester must be
// allowed to do that themselves. Without it, anyone who may write ServingCertRequests could make certapi
// write Secrets. And unless certapi runs with --secret-delivery-scope=cluster, the namespace must have
// opted in to Secret delivery (label certapi.dev/secret-delivery=enabled, see package deliveryscope):
// certapi's ServiceAccount reads and writes Secrets only where a namespace asked for it.
package secretaccess

import (
	"context"
	"errors"
	"fmt"
	"io"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	genericadmissioninitializer "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/deliveryscope"
)

// PluginName is the name to enable or disable it with --enable-admission-plugins and --disable-admission-plugins.
const PluginName = "CertapiSecretAccess"

// Register adds the plugin to plugins.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}, nil
	})
}

// Plugin refuses a ServingCertRequest create or spec change that makes certapi write the Secret
// spec.secretName names, when its namespace has not opted in to Secret delivery (in the
// labelled-namespaces scope), or when the requesting user may not both create and update that Secret. certapi
// writes the Secret when a request with secretName is created, when secretName is set or changed, and
// on any other spec change while secretName is set (the certificate is re-issued for the new spec). It
// asks the same authorizer that guards certapi's own API, which for an aggregated server is a
// SubjectAccessReview to kube-apiserver.
type Plugin struct {
	*admission.Handler
	authorizer authorizer.Authorizer
	// policy says where Secrets may be delivered (Initializer); the zero value is the labelled-namespaces
	// scope.
	policy deliveryscope.Policy
	// namespaces is the server's namespace cache (the one NamespaceLifecycle uses); kube reads a
	// namespace the cache does not show opted in yet (created or labelled a moment ago).
	namespaces corev1listers.NamespaceLister
	kube       kubernetes.Interface
}

var (
	_ admission.ValidationInterface                                = &Plugin{}
	_ admission.InitializationValidator                            = &Plugin{}
	_ genericadmissioninitializer.WantsExternalKubeInformerFactory = &Plugin{}
	_ genericadmissioninitializer.WantsExternalKubeClientSet       = &Plugin{}
)

// Initializer hands the plugin where Secrets may be delivered (--secret-delivery-scope) and certapi's
// ServiceAccount, which its refusals name.
type Initializer struct {
	Policy deliveryscope.Policy
}

var _ admission.PluginInitializer = Initializer{}

// Initialize configures the plugin.
func (i Initializer) Initialize(plugin admission.Interface) {
	if p, ok := plugin.(*Plugin); ok {
		p.policy = i.Policy
	}
}

// SetExternalKubeInformerFactory takes the namespace lister (the informer NamespaceLifecycle uses, so
// no watch of its own) and waits for it before answering.
func (p *Plugin) SetExternalKubeInformerFactory(f informers.SharedInformerFactory) {
	inf := f.Core().V1().Namespaces()
	p.namespaces = inf.Lister()
	p.SetReadyFunc(inf.Informer().HasSynced)
}

// SetExternalKubeClientSet takes the client that reads a namespace the cache does not show opted in.
func (p *Plugin) SetExternalKubeClientSet(c kubernetes.Interface) { p.kube = c }

// SetAuthorizer receives the server's authorizer from the admission initializer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// ValidateInitialization fails start-up when no authorizer was given.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil {
		return errors.New(PluginName + " needs an authorizer")
	}
	if p.policy.Scope != deliveryscope.Cluster && p.namespaces == nil {
		return errors.New(PluginName + " needs the namespace informer in the " + string(deliveryscope.LabelledNamespaces) + " scope")
	}
	return nil
}

// optedIn reports whether Secrets may be delivered into namespace: always in the cluster scope,
// otherwise when the namespace carries the opt-in label. The cache answers first; a namespace it does
// not show opted in is read, since it may have been created or labelled a moment ago.
func (p *Plugin) optedIn(ctx context.Context, namespace string) (bool, error) {
	if p.policy.Scope == deliveryscope.Cluster {
		return true, nil
	}
	if !p.WaitForReady() {
		return false, errors.New("the namespace cache has not synced yet; try again")
	}
	ns, err := p.namespaces.Get(namespace)
	if err == nil && p.policy.Allows(ns.Labels) {
		return true, nil
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("reading namespace %q from the cache: %w", namespace, err)
	}
	if p.kube == nil {
		return false, nil
	}
	live, err := p.kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading namespace %q: %w", namespace, err)
	}
	return p.policy.Allows(live.Labels), nil
}

// Validate checks create and update of servingcertrequests.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != certapi.Resource("servingcertrequests") || a.GetSubresource() != "" {
		return nil
	}
	obj, ok := a.GetObject().(*certapi.ServingCertRequest)
	if !ok || obj.Spec.SecretName == "" {
		return nil
	}
	why := "setting secretName asks certapi to write it"
	if a.GetOperation() == admission.Update {
		old, ok := a.GetOldObject().(*certapi.ServingCertRequest)
		switch {
		case !ok:
		case apiequality.Semantic.DeepEqual(old.Spec, obj.Spec):
			return nil // certapi writes nothing new: the spec is what was allowed before
		case old.Spec.SecretName == obj.Spec.SecretName:
			why = "a change of the spec makes certapi re-issue the certificate in it"
		}
	}
	switch ok, err := p.optedIn(ctx, a.GetNamespace()); {
	case err != nil:
		return admission.NewForbidden(a, fmt.Errorf("spec.secretName %q: cannot tell whether namespace %q has opted in to Secret delivery: %w",
			obj.Spec.SecretName, a.GetNamespace(), err))
	case !ok:
		return admission.NewForbidden(a, fmt.Errorf("spec.secretName %q: %s", obj.Spec.SecretName, p.policy.NotOptedIn(a.GetNamespace())))
	}
	user := a.GetUserInfo()
	ask := func(verb, name string) (authorizer.Decision, string, error) {
		return p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
			User:            user,
			Verb:            verb,
			Namespace:       a.GetNamespace(),
			APIVersion:      "v1",
			Resource:        "secrets",
			Name:            name,
			ResourceRequest: true,
		})
	}
	// create as kube-apiserver authorizes it (a create has no name yet), update on that Secret by name.
	for _, verb := range []string{"create", "update"} {
		decision, reason, err := ask(verb, "")
		if decision == authorizer.DecisionAllow {
			// Allowed on every Secret of the namespace (no name means all of them), so on this one. The
			// delegated authorizer caches this answer, which is the same for all of a user's requests in
			// the namespace; by name, each request with a new secretName would cost a SubjectAccessReview.
			continue
		}
		if verb == "update" {
			decision, reason, err = ask(verb, obj.Spec.SecretName)
		}
		if decision == authorizer.DecisionAllow {
			continue
		}
		msg := fmt.Sprintf("spec.secretName %q: user %q may not %s secrets in namespace %q, and %s on their behalf; "+
			"get RBAC create and update on Secret %q there, or leave secretName unset and use the servingcerts subresource",
			obj.Spec.SecretName, user.GetName(), verb, a.GetNamespace(), why, obj.Spec.SecretName)
		if err != nil {
			msg += fmt.Sprintf(" (authorization check failed: %v)", err)
		} else if reason != "" {
			msg += " (" + reason + ")"
		}
		return admission.NewForbidden(a, errors.New(msg))
	}
	return nil
}
