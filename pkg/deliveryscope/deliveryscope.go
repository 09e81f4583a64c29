// Package deliveryscope says where certapi may deliver Secrets (ServingCertRequest spec.secretName) and
// how a namespace opts in: the one place the admission plugin, which refuses a request in a namespace
// that has not opted in, and the Secret delivery controller, which reports such a request, agree on it.
// It reads nothing: its callers give it what they have (a namespace's labels, the flag's value).
package deliveryscope

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// Scope is the value of --secret-delivery-scope.
type Scope string

const (
	// LabelledNamespaces delivers only into namespaces labelled
	// certapi.dev/secret-delivery=enabled (the default).
	LabelledNamespaces Scope = certapiv1alpha1.SecretDeliveryScopeLabelledNamespaces
	// Cluster delivers into every namespace.
	Cluster Scope = certapiv1alpha1.SecretDeliveryScopeCluster
)

// Parse reads a --secret-delivery-scope value; "" is the default, LabelledNamespaces.
func Parse(s string) (Scope, error) {
	switch Scope(s) {
	case "", LabelledNamespaces:
		return LabelledNamespaces, nil
	case Cluster:
		return Cluster, nil
	}
	return "", fmt.Errorf("%q is not a Secret delivery scope; accepted: %s (the default: only namespaces labelled %s=%s) or %s (every namespace; "+
		"certapi's ServiceAccount then needs the ClusterRole %s cluster-wide)",
		s, LabelledNamespaces, certapiv1alpha1.LabelSecretDelivery, certapiv1alpha1.SecretDeliveryEnabled, Cluster, certapiv1alpha1.ClusterRoleSecretDelivery)
}

// String returns the flag value.
func (s Scope) String() string { return string(s) }

// Set parses a flag value (pflag.Value).
func (s *Scope) Set(v string) error {
	p, err := Parse(v)
	if err != nil {
		return err
	}
	*s = p
	return nil
}

// Type names the flag's type in --help (pflag.Value).
func (s *Scope) Type() string { return "scope" }

// OptedIn reports whether a namespace with these labels has opted in to Secret delivery.
func OptedIn(labels map[string]string) bool {
	return labels[certapiv1alpha1.LabelSecretDelivery] == certapiv1alpha1.SecretDeliveryEnabled
}

// Policy is where certapi delivers Secrets, and who certapi is, for the instructions it gives.
type Policy struct {
	Scope Scope
	// ServiceAccount is certapi's ServiceAccount, named in the RoleBinding a namespace creates to opt in.
	// The chart names it as certapi's Service (--service-namespace, --service-name); empty: described
	// in words.
	ServiceAccount types.NamespacedName
}

// Allows reports whether Secrets may be delivered into a namespace with these labels (nil for a
// namespace that is not known: only the Cluster scope allows it).
func (p Policy) Allows(labels map[string]string) bool {
	return p.Scope == Cluster || OptedIn(labels)
}

// clusterRole is the name of the ClusterRole to bind, as the chart names it for certapi's release.
func (p Policy) clusterRole() string {
	name := p.ServiceAccount.Name
	if name == "" || name == "certapi" {
		return certapiv1alpha1.ClusterRoleSecretDelivery
	}
	return name + ":secret-delivery"
}

// HowToOptIn says what the namespace's admin runs to opt namespace in: the RoleBinding to the
// ClusterRole for certapi's ServiceAccount, then the label (in that order, so that certapi, which starts
// watching the namespace's Secrets when the label appears, is never refused), as commands that run as
// written.
func (p Policy) HowToOptIn(namespace string) string {
	return fmt.Sprintf("let certapi's ServiceAccount write Secrets there, then label the namespace: "+
		"`kubectl create rolebinding %s -n %s --clusterrole=%s --serviceaccount=%s` and `kubectl label namespace %s %s=%s`",
		strings.ReplaceAll(p.clusterRole(), ":", "-"), namespace, p.clusterRole(), p.serviceAccount(),
		namespace, certapiv1alpha1.LabelSecretDelivery, certapiv1alpha1.SecretDeliveryEnabled)
}

// NotOptedIn is the message for a request with spec.secretName in a namespace that has not opted in.
func (p Policy) NotOptedIn(namespace string) string {
	return fmt.Sprintf("namespace %q has not opted in to Secret delivery (spec.secretName): %s; "+
		"or leave spec.secretName unset and use the servingcerts subresource or a podCertificate volume",
		namespace, p.HowToOptIn(namespace))
}

// Forbidden is the message for a namespace where kube-apiserver refuses certapi's ServiceAccount the
// Secret access delivery needs: most often the namespace is labelled but has no RoleBinding to the
// ClusterRole (or a narrower one); an admission policy may refuse a write too. detail is
// kube-apiserver's answer, which says which.
func (p Policy) Forbidden(namespace, detail string) string {
	return fmt.Sprintf("kube-apiserver refuses certapi's ServiceAccount access to Secrets in namespace %q: %s; "+
		"to deliver Secrets there, bind the ClusterRole %s to it in that namespace: `kubectl create rolebinding %s -n %s --clusterrole=%s --serviceaccount=%s`",
		namespace, detail, p.clusterRole(), strings.ReplaceAll(p.clusterRole(), ":", "-"), namespace, p.clusterRole(), p.serviceAccount())
}

func (p Policy) serviceAccount() string {
	if p.ServiceAccount.Name != "" && p.ServiceAccount.Namespace != "" {
		return p.ServiceAccount.Namespace + ":" + p.ServiceAccount.Name
	}
	return "<certapi's namespace>:<certapi's ServiceAccount>"
}
