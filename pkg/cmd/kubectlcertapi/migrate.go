package kubectlcertapi

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/kubectl/pkg/util/templates"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// `kubectl certapi migrate` reads a cluster's cert-manager Certificates and the objects cainjector
// injects into, and prints the cut-over of docs/migration.md as commands. It changes nothing.

// cert-manager's names this command reads.
const (
	cmInjectCAFrom       = "cert-manager.io/inject-ca-from"
	cmInjectCAFromSecret = "cert-manager.io/inject-ca-from-secret"
	cmInjectAPIServerCA  = "cert-manager.io/inject-apiserver-ca"
)

// certificatesGVR is cert-manager's Certificate.
var certificatesGVR = schema.GroupVersionResource{Group: "cert-manager.io", Version: "v1", Resource: "certificates"}

// injectableKinds are the kinds cainjector injects into, with the resource name kubectl takes.
var injectableKinds = []struct {
	gvr      schema.GroupVersionResource
	resource string
}{
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}, "validatingwebhookconfiguration"},
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}, "mutatingwebhookconfiguration"},
	{schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}, "customresourcedefinition"},
	{schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}, "apiservice"},
}

// cmCertificate is what the plan needs of a cert-manager Certificate.
type cmCertificate struct {
	Namespace, Name, SecretName string
	DNSNames                    []string
	Duration                    string
	// Unsupported names the Certificate's fields certapi does not offer (IP addresses, URIs, ...).
	Unsupported []string
}

// injectTarget is an object cainjector injects into: kubectl's resource name, its name, and its
// cert-manager annotations.
type injectTarget struct {
	Resource, Name string
	Annotations    map[string]string
}

// mappedRequest is the ServingCertRequest a Certificate becomes, or why it cannot.
type mappedRequest struct {
	service  string
	dnsNames []string
	duration string
	problem  string
}

// mapCertificate maps c to a ServingCertRequest: its service is the first name of the form
// <service>.<namespace>.svc[.<clusterDomain>]; other names must be names of Services of the namespace.
func mapCertificate(c cmCertificate, clusterDomain string) mappedRequest {
	var m mappedRequest
	if len(c.Unsupported) > 0 {
		m.problem = "it sets " + strings.Join(c.Unsupported, ", ") + ", which certapi does not issue"
		return m
	}
	if len(c.DNSNames) == 0 {
		m.problem = "it has no dnsNames"
		return m
	}
	for _, n := range c.DNSNames {
		svc, wildcard, ok := serviceOf(n, c.Namespace, clusterDomain)
		if !ok {
			m.problem = fmt.Sprintf("dnsName %q is not <service>.%s.svc[.%s]; certapi issues only the namespace's Service names", n, c.Namespace, clusterDomain)
			return m
		}
		switch {
		case m.service == "" && !wildcard:
			m.service = svc
		case svc == m.service && !wildcard:
			// <svc>.<ns>.svc and its cluster-domain form are in every certificate
		default:
			if !containsString(m.dnsNames, n) {
				m.dnsNames = append(m.dnsNames, n)
			}
		}
	}
	if m.service == "" {
		m.problem = "none of its dnsNames is a Service's own name (only wildcards)"
		return m
	}
	// A wildcard or another name may have come before the service's own name: drop the service's own.
	kept := m.dnsNames[:0]
	for _, n := range m.dnsNames {
		if svc, wildcard, _ := serviceOf(n, c.Namespace, clusterDomain); wildcard || svc != m.service {
			kept = append(kept, n)
		}
	}
	m.dnsNames = kept
	if c.Duration != "" {
		if d, err := time.ParseDuration(c.Duration); err == nil && d >= time.Hour && d <= 2160*time.Hour {
			m.duration = d.String()
		}
	}
	return m
}

// serviceOf returns the Service a DNS name of namespace ns names, and whether it is a wildcard.
func serviceOf(name, ns, clusterDomain string) (svc string, wildcard, ok bool) {
	wildcard = strings.HasPrefix(name, "*.")
	name = strings.TrimPrefix(name, "*.")
	for _, suffix := range []string{"." + ns + ".svc." + clusterDomain, "." + ns + ".svc"} {
		if s, found := strings.CutSuffix(name, suffix); found && s != "" && !strings.Contains(s, ".") {
			return s, wildcard, true
		}
	}
	return "", false, false
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// writePlan prints the cut-over for targets as commands, from the Certificates they inject from.
func writePlan(w io.Writer, certs []cmCertificate, targets []injectTarget, clusterDomain string) error {
	byName := map[string]cmCertificate{}
	bySecret := map[string]cmCertificate{}
	for _, c := range certs {
		byName[c.Namespace+"/"+c.Name] = c
		if c.SecretName != "" {
			bySecret[c.Namespace+"/"+c.SecretName] = c
		}
	}
	sort.Slice(targets, func(a, b int) bool {
		if targets[a].Resource != targets[b].Resource {
			return targets[a].Resource < targets[b].Resource
		}
		return targets[a].Name < targets[b].Name
	})
	type planned struct {
		t      injectTarget
		remove []string
		cert   cmCertificate
	}
	var plan []planned
	var notes []string
	requests := map[string]mappedRequest{}
	// planCerts are the Certificates of the plan, each once, in the order the plan first names them.
	var planCerts []cmCertificate
	for _, t := range targets {
		var remove []string
		var cert cmCertificate
		var found bool
		for _, a := range []string{cmInjectCAFrom, cmInjectCAFromSecret, cmInjectAPIServerCA} {
			if _, ok := t.Annotations[a]; ok {
				remove = append(remove, a)
			}
		}
		switch {
		case t.Annotations[cmInjectAPIServerCA] != "":
			notes = append(notes, fmt.Sprintf("%s %s: %s injects kube-apiserver's own CA; certapi has no equivalent, so it is left to cert-manager", t.Resource, t.Name, cmInjectAPIServerCA))
			continue
		case t.Annotations[cmInjectCAFrom] != "":
			cert, found = byName[t.Annotations[cmInjectCAFrom]]
			if !found {
				notes = append(notes, fmt.Sprintf("%s %s: %s names Certificate %s, which does not exist; left as it is", t.Resource, t.Name, cmInjectCAFrom, t.Annotations[cmInjectCAFrom]))
				continue
			}
		case t.Annotations[cmInjectCAFromSecret] != "":
			cert, found = bySecret[t.Annotations[cmInjectCAFromSecret]]
			if !found {
				notes = append(notes, fmt.Sprintf("%s %s: %s names Secret %s, which no Certificate writes; left as it is", t.Resource, t.Name, cmInjectCAFromSecret, t.Annotations[cmInjectCAFromSecret]))
				continue
			}
		default:
			continue
		}
		key := cert.Namespace + "/" + cert.Name
		m, seen := requests[key]
		if !seen {
			m = mapCertificate(cert, clusterDomain)
			requests[key] = m
		}
		if m.problem != "" {
			notes = append(notes, fmt.Sprintf("%s %s: Certificate %s cannot become a ServingCertRequest: %s; keep cert-manager for it", t.Resource, t.Name, key, m.problem))
			continue
		}
		if !seen {
			planCerts = append(planCerts, cert)
		}
		plan = append(plan, planned{t: t, remove: remove, cert: cert})
	}

	var b strings.Builder
	b.WriteString("# The cut-over from cert-manager to certapi (docs/migration.md), for this cluster. Nothing was changed.\n")
	b.WriteString("# Run one step at a time; each must be done before the next starts.\n")
	if len(plan) == 0 {
		b.WriteString("\n# Nothing to migrate: no webhook configuration, CRD or APIService is injected from a Certificate certapi can replace.\n")
	} else {
		b.WriteString("\n# 1. A ServingCertRequest per Certificate (drop --secret to use pkg/servingcert instead of a Secret).\n")
		b.WriteString("kubectl certapi check --wait\n")
		for _, c := range planCerts {
			m := requests[c.Namespace+"/"+c.Name]
			fmt.Fprintf(&b, "kubectl create servingcertrequest %s -n %s --service=%s", m.service, c.Namespace, m.service)
			for _, n := range m.dnsNames {
				fmt.Fprintf(&b, " --dns-name='%s'", n)
			}
			if m.duration != "" {
				fmt.Fprintf(&b, " --duration=%s", m.duration)
			}
			if c.SecretName != "" {
				fmt.Fprintf(&b, " --secret=%s-certapi", c.SecretName)
			}
			b.WriteString(" --wait\n")
		}
		fmt.Fprintf(&b, "\n# 2. certapi's annotations, both in one command (certapi writes nothing while cert-manager's are there).\n")
		for _, p := range plan {
			fmt.Fprintf(&b, "kubectl annotate %s %s %s=true %s=true\n", p.t.Resource, p.t.Name, certapiv1alpha1.AnnotationInjectCABundle, certapiv1alpha1.AnnotationKeepForeignCA)
		}
		b.WriteString("\n# 3. Stop cainjector; certapi then writes its bundle followed by cert-manager's CA (Event KeepingForeignCA).\n")
		for _, p := range plan {
			fmt.Fprintf(&b, "kubectl annotate %s %s", p.t.Resource, p.t.Name)
			for _, a := range p.remove {
				fmt.Fprintf(&b, " %s-", a)
			}
			b.WriteString("\n")
		}
		b.WriteString("kubectl get events -A --field-selector reason=KeepingForeignCA\n")
		b.WriteString("\n# 4. Move each webhook server to certapi's certificate, and wait until every pod serves it:\n")
		for _, c := range planCerts {
			if c.SecretName != "" {
				fmt.Fprintf(&b, "#    the pods mounting Secret %s/%s: mount %s-certapi instead (or use pkg/servingcert), then kubectl rollout status\n", c.Namespace, c.SecretName, c.SecretName)
			} else {
				fmt.Fprintf(&b, "#    the server of Certificate %s/%s: pkg/servingcert, then kubectl rollout status\n", c.Namespace, c.Name)
			}
		}
		b.WriteString("#    then check that every endpoint is verified by certapi's Active CA, no longer by cert-manager's:\n")
		for _, p := range plan {
			fmt.Fprintf(&b, "kubectl certapi inspect %s/%s\n", p.t.Resource, p.t.Name)
		}
		b.WriteString("\n# 5. Drop cert-manager's CA from the caBundle.\n")
		for _, p := range plan {
			fmt.Fprintf(&b, "kubectl annotate %s %s %s-\n", p.t.Resource, p.t.Name, certapiv1alpha1.AnnotationKeepForeignCA)
		}
		b.WriteString("\n# 6. Delete cert-manager's objects (their Issuers too, once nothing else uses them).\n")
		for _, c := range planCerts {
			fmt.Fprintf(&b, "kubectl delete certificate %s -n %s\n", c.Name, c.Namespace)
			if c.SecretName != "" {
				fmt.Fprintf(&b, "kubectl delete secret %s -n %s\n", c.SecretName, c.Namespace)
			}
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n# Not in the plan:\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "#   %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// certificateFrom reads what the plan needs of a cert-manager Certificate.
func certificateFrom(u *unstructured.Unstructured) cmCertificate {
	c := cmCertificate{Namespace: u.GetNamespace(), Name: u.GetName()}
	c.SecretName, _, _ = unstructured.NestedString(u.Object, "spec", "secretName")
	c.DNSNames, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "dnsNames")
	c.Duration, _, _ = unstructured.NestedString(u.Object, "spec", "duration")
	for _, f := range []string{"ipAddresses", "uris", "emailAddresses"} {
		if v, _, _ := unstructured.NestedSlice(u.Object, "spec", f); len(v) > 0 {
			c.Unsupported = append(c.Unsupported, "spec."+f)
		}
	}
	if isCA, _, _ := unstructured.NestedBool(u.Object, "spec", "isCA"); isCA {
		c.Unsupported = append(c.Unsupported, "spec.isCA")
	}
	if cn, _, _ := unstructured.NestedString(u.Object, "spec", "commonName"); cn != "" && !containsString(c.DNSNames, cn) {
		c.DNSNames = append(c.DNSNames, cn)
	}
	return c
}

// readMigration lists cert-manager's Certificates (none when cert-manager's API is not installed) and the
// objects that carry one of cainjector's annotations.
func readMigration(ctx context.Context, dyn dynamic.Interface, meta metadata.Interface) ([]cmCertificate, []injectTarget, error) {
	var certs []cmCertificate
	list, err := dyn.Resource(certificatesGVR).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, nil, fmt.Errorf("listing cert-manager's certificates: %w", err)
	default:
		for n := range list.Items {
			certs = append(certs, certificateFrom(&list.Items[n]))
		}
	}
	var targets []injectTarget
	for _, k := range injectableKinds {
		objs, err := meta.Resource(k.gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("listing %s: %w", k.gvr.Resource, err)
		}
		for _, o := range objs.Items {
			ann := map[string]string{}
			for a, v := range o.Annotations {
				if a == cmInjectCAFrom || a == cmInjectCAFromSecret || a == cmInjectAPIServerCA {
					ann[a] = v
				}
			}
			if len(ann) > 0 {
				targets = append(targets, injectTarget{Resource: k.resource, Name: o.Name, Annotations: ann})
			}
		}
	}
	return certs, targets, nil
}

type migrateOptions struct {
	*rootOptions
	clusterDomain string
}

func newMigrateCmd(root *rootOptions) *cobra.Command {
	o := &migrateOptions{rootOptions: root, clusterDomain: "cluster.local"}
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Print the cut-over from cert-manager to certapi for this cluster, as commands; changes nothing",
		Long: templates.LongDesc(`
			Read cert-manager's Certificates and the webhook configurations, CRDs and APIServices that
			cainjector injects into (annotations cert-manager.io/inject-ca-from, inject-ca-from-secret,
			inject-apiserver-ca), and print the cut-over of docs/migration.md as kubectl commands: the
			ServingCertRequests to create, certapi's annotations to add (with certapi.dev/keep-foreign-ca,
			so that kube-apiserver trusts both CAs while the webhooks move), cert-manager's annotations to
			remove, and what to delete at the end. Objects it cannot migrate are listed with the reason.
			It changes nothing in the cluster.`),
		Example: templates.Examples(`
			kubectl certapi migrate
			kubectl certapi migrate --cluster-domain=corp.example`),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.clusterDomain, "cluster-domain", o.clusterDomain, "The cluster's DNS domain, as in <service>.<namespace>.svc.<domain> names.")
	return cmd
}

func (o *migrateOptions) run(ctx context.Context) error {
	config, err := o.configFlags.ToRESTConfig()
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("making a dynamic client: %w", err)
	}
	meta, err := metadata.NewForConfig(config)
	if err != nil {
		return fmt.Errorf("making a metadata client: %w", err)
	}
	certs, targets, err := readMigration(ctx, dyn, meta)
	if err != nil {
		return err
	}
	return writePlan(o.Out, certs, targets, o.clusterDomain)
}
