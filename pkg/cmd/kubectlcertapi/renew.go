package kubectlcertapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// requestResource is how kubectl names a ServingCertRequest in its output.
const requestResource = "servingcertrequest.certapi.dev"

type renewOptions struct {
	*rootOptions
	all           bool
	allNamespaces bool
	selector      string
	// qualify names requests NAMESPACE/NAME in the output: set when the command spans namespaces.
	qualify bool
	// now gives the value written into the annotation; time.Now outside tests.
	now func() time.Time
}

func newRenewCmd(root *rootOptions) *cobra.Command {
	o := &renewOptions{rootOptions: root, now: time.Now}
	cmd := &cobra.Command{
		Use:   "renew (NAME | NAMESPACE/NAME ... | --all | -l SELECTOR) [-A]",
		Short: "Re-issue the certificate a ServingCertRequest delivers into its Secret, now",
		Long: templates.LongDesc(`
			Ask certapi to re-issue the certificate of each ServingCertRequest named, whatever its renewal
			time: the Secret spec.secretName names gets a new key and certificate within moments, as at a
			routine renewal, and the request's status and Events say so.

			The command sets the annotation certapi.dev/renew-requested-at on each request to the current
			time; certapi records on the Secret the value it re-issued for, so each request is answered
			once. It needs patch on servingcertrequests (the edit and admin roles have it).

			Only the Secret is renewed: clients of the servingcerts subresource (pkg/servingcert) and pods
			with a podCertificate volume hold keys certapi never sees, and renew on their own schedule. A
			request named that has no spec.secretName is an error; one selected by --all or -l is skipped
			with a note.`),
		Example: templates.Examples(`
			# Re-issue the certificate of the request my-webhook in the namespace webhooks
			kubectl certapi renew webhooks/my-webhook
			kubectl certapi renew my-webhook -n webhooks

			# Every request of the current namespace, or of the cluster
			kubectl certapi renew --all
			kubectl certapi renew --all -A

			# The requests labelled app=my-operator in every namespace
			kubectl certapi renew -l app=my-operator -A`),
		ValidArgsFunction: o.completeNames,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.validate(cmd, args); err != nil {
				return err
			}
			return o.run(cmd.Context(), args)
		},
	}
	cmd.Flags().BoolVar(&o.all, "all", o.all, "Renew every ServingCertRequest with a spec.secretName in the namespace (every namespace with -A).")
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", o.allNamespaces, "With --all or -l: look in every namespace.")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", o.selector, "Renew the ServingCertRequests with these labels (a label selector, as kubectl get -l takes).")
	return cmd
}

// renewTarget is one request a renew names: by argument, or found by --all or -l.
type renewTarget struct {
	namespace, name string
}

// validate checks the combination of arguments and flags, with kubectl's usage errors.
func (o *renewOptions) validate(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) > 0 && (o.all || o.selector != ""):
		return cmdutil.UsageErrorf(cmd, "name ServingCertRequests or select them with --all or -l, not both")
	case len(args) == 0 && !o.all && o.selector == "":
		return cmdutil.UsageErrorf(cmd, "name at least one ServingCertRequest (NAME or NAMESPACE/NAME), or select them with --all or -l SELECTOR")
	case o.all && o.selector != "":
		return cmdutil.UsageErrorf(cmd, "--all selects every request; -l selects some: give one of them")
	case o.allNamespaces && len(args) > 0:
		return cmdutil.UsageErrorf(cmd, "-A goes with --all or -l; a named request takes its namespace from NAMESPACE/NAME or -n")
	}
	if o.selector != "" {
		if _, err := labels.Parse(o.selector); err != nil {
			return cmdutil.UsageErrorf(cmd, "-l %q is not a label selector: %v", o.selector, err)
		}
	}
	return nil
}

// parseRenewArgs turns each argument, NAME or NAMESPACE/NAME, into a target; a bare NAME takes namespace.
func parseRenewArgs(args []string, namespace string) ([]renewTarget, error) {
	var out []renewTarget
	for _, a := range args {
		ns, name := namespace, a
		if before, after, found := strings.Cut(a, "/"); found {
			ns, name = before, after
		}
		for _, part := range []struct{ what, v string }{{"namespace", ns}, {"name", name}} {
			if errs := validation.IsDNS1123Subdomain(part.v); len(errs) > 0 {
				return nil, fmt.Errorf("%q: the %s %q is not valid (%s); give NAME or NAMESPACE/NAME", a, part.what, part.v, strings.Join(errs, "; "))
			}
		}
		out = append(out, renewTarget{namespace: ns, name: name})
	}
	return out, nil
}

func (o *renewOptions) run(ctx context.Context, args []string) error {
	namespace, _, err := o.namespace()
	if err != nil {
		return err
	}
	var targets []renewTarget
	if len(args) > 0 {
		if targets, err = parseRenewArgs(args, namespace); err != nil {
			return err
		}
		for _, t := range targets {
			o.qualify = o.qualify || t.namespace != namespace
		}
	}
	c, err := o.clients()
	if err != nil {
		return err
	}
	if len(args) == 0 {
		listNS := namespace
		if o.allNamespaces {
			listNS = metav1.NamespaceAll
		}
		list, err := c.certapi.CertapiV1alpha1().ServingCertRequests(listNS).List(ctx, metav1.ListOptions{LabelSelector: o.selector})
		if err != nil {
			return fmt.Errorf("listing ServingCertRequests: %w", err)
		}
		for _, r := range list.Items {
			if r.Spec.SecretName == "" {
				fmt.Fprintf(o.ErrOut, "%s/%s skipped: no spec.secretName, so certapi holds no certificate of it to renew\n", requestResource, o.display(r.Namespace, r.Name))
				continue
			}
			targets = append(targets, renewTarget{namespace: r.Namespace, name: r.Name})
		}
		if len(targets) == 0 {
			where := "namespace " + namespace
			if o.allNamespaces {
				where = "any namespace"
			}
			fmt.Fprintf(o.ErrOut, "No ServingCertRequest with a spec.secretName found in %s.\n", where)
			return nil
		}
	}

	value := o.now().UTC().Format(time.RFC3339Nano)
	var errs []error
	for _, t := range targets {
		if err := o.renew(ctx, c, t, value, len(args) > 0); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(o.Out, "%s/%s renewal requested\n", requestResource, o.display(t.namespace, t.name))
	}
	return errors.Join(errs...)
}

// renew annotates one request to ask for its renewal. A named request without spec.secretName is an
// error (named is true); the caller skips those it selected.
func (o *renewOptions) renew(ctx context.Context, c *clients, t renewTarget, value string, named bool) error {
	requests := c.certapi.CertapiV1alpha1().ServingCertRequests(t.namespace)
	if named {
		req, err := requests.Get(ctx, t.name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading ServingCertRequest %s/%s: %w", t.namespace, t.name, err)
		}
		if req.Spec.SecretName == "" {
			return fmt.Errorf("ServingCertRequest %s/%s has no spec.secretName, so certapi holds no certificate of it to renew: "+
				"clients of its servingcerts subresource and podCertificate volumes renew on their own schedule", t.namespace, t.name)
		}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]string{certapiv1alpha1.AnnotationRenewRequestedAt: value}},
	})
	if err != nil {
		return fmt.Errorf("encoding the patch of ServingCertRequest %s/%s: %w", t.namespace, t.name, err)
	}
	if _, err := requests.Patch(ctx, t.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("requesting the renewal of ServingCertRequest %s/%s: %w", t.namespace, t.name, err)
	}
	return nil
}

// display names a request in the output: NAMESPACE/NAME when the command spans namespaces, NAME
// otherwise, as kubectl does.
func (o *renewOptions) display(namespace, name string) string {
	if o.qualify || o.allNamespaces {
		return namespace + "/" + name
	}
	return name
}

// completeNames completes the names of the namespace's ServingCertRequests that have a spec.secretName,
// for shell completion; it offers nothing when the cluster cannot be reached within a few seconds.
func (o *renewOptions) completeNames(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if o.all || o.selector != "" || strings.Contains(toComplete, "/") {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	namespace, _, err := o.namespace()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	c, err := o.clients()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
	defer cancel()
	list, err := c.certapi.CertapiV1alpha1().ServingCertRequests(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var names []string
	for _, r := range list.Items {
		if r.Spec.SecretName != "" && strings.HasPrefix(r.Name, toComplete) && !slices.Contains(args, r.Name) {
			names = append(names, r.Name)
		}
	}
	return names, cobra.ShellCompDirectiveNoFileComp
}
