// Package secretaccess is the admission plugin that guards spec.secretName: asking certapi to deliver a
// private key into a Secret is asking it to create a Secret, so the requester must be allowed to do that
// themselves. Without it, anyone who may write ServingCertRequests could make certapi write Secrets.
package secretaccess

import (
	"context"
	"errors"
	"fmt"
	"io"

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

// Plugin refuses a ServingCertRequest whose secretName is set or changed by a user who may not create
// Secrets in its namespace. It asks the same authorizer that guards certapi's own API, which for an
// aggregated server is a SubjectAccessReview to kube-apiserver.
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
	if a.GetOperation() == admission.Update {
		if old, ok := a.GetOldObject().(*certapi.ServingCertRequest); ok && old.Spec.SecretName == obj.Spec.SecretName {
			return nil // already allowed when it was set
		}
	}
	user := a.GetUserInfo()
	decision, reason, err := p.authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User:            user,
		Verb:            "create",
		Namespace:       a.GetNamespace(),
		APIVersion:      "v1",
		Resource:        "secrets",
		ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	msg := fmt.Sprintf("spec.secretName %q: user %q may not create secrets in namespace %q, and setting secretName asks certapi to create one on their behalf; get RBAC create on secrets there, or leave secretName unset and use the servingcerts subresource",
		obj.Spec.SecretName, user.GetName(), a.GetNamespace())
	if err != nil {
		msg += fmt.Sprintf(" (authorization check failed: %v)", err)
	} else if reason != "" {
		msg += " (" + reason + ")"
	}
	return admission.NewForbidden(a, errors.New(msg))
}
