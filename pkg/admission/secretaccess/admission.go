// Package secretaccess is the admission plugin that guards spec.secretName: asking certapi to deliver a
// private key into a Secret is asking it to create or overwrite that Secret, so the requester must be
// allowed to do that themselves. Without it, anyone who may write ServingCertRequests could make certapi
// write Secrets.
package secretaccess

import (
	"context"
	"errors"
	"fmt"
	"io"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/certapi/certapi/pkg/apis/certapi"
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
// spec.secretName names, when the requesting user may not both create and update that Secret. certapi
// writes the Secret when a request with secretName is created, when secretName is set or changed, and
// on any other spec change while secretName is set (the certificate is re-issued for the new spec). It
// asks the same authorizer that guards certapi's own API, which for an aggregated server is a
// SubjectAccessReview to kube-apiserver.
type Plugin struct {
	*admission.Handler
	authorizer authorizer.Authorizer
}

var (
	_ admission.ValidationInterface     = &Plugin{}
	_ admission.InitializationValidator = &Plugin{}
)

// SetAuthorizer receives the server's authorizer from the admission initializer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authorizer = a }

// ValidateInitialization fails start-up when no authorizer was given.
func (p *Plugin) ValidateInitialization() error {
	if p.authorizer == nil {
		return errors.New(PluginName + " needs an authorizer")
	}
	return nil
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
