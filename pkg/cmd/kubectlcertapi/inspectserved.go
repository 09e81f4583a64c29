package kubectlcertapi

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/printers"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/servedcert"
	"github.com/certapi/certapi/pkg/signer"
)

// Kinds `kubectl certapi inspect` reads, as the API names them.
const (
	kindValidatingWebhookConfiguration = "ValidatingWebhookConfiguration"
	kindMutatingWebhookConfiguration   = "MutatingWebhookConfiguration"
	kindCustomResourceDefinition       = "CustomResourceDefinition"
	kindAPIService                     = "APIService"
	kindSecret                         = "Secret"
)

// inspectKinds are the kinds inspect accepts, with every name a kubectl user types for them (singular,
// plural, short name, and the forms qualified with the API group), lower case.
var inspectKinds = []struct {
	kind  string
	short string
	names []string
}{
	{kindValidatingWebhookConfiguration, "vwc", []string{"validatingwebhookconfiguration", "validatingwebhookconfigurations",
		"validatingwebhookconfiguration.admissionregistration.k8s.io", "validatingwebhookconfigurations.admissionregistration.k8s.io", "vwc"}},
	{kindMutatingWebhookConfiguration, "mwc", []string{"mutatingwebhookconfiguration", "mutatingwebhookconfigurations",
		"mutatingwebhookconfiguration.admissionregistration.k8s.io", "mutatingwebhookconfigurations.admissionregistration.k8s.io", "mwc"}},
	{kindCustomResourceDefinition, "crd", []string{"customresourcedefinition", "customresourcedefinitions",
		"customresourcedefinition.apiextensions.k8s.io", "customresourcedefinitions.apiextensions.k8s.io", "crd", "crds"}},
	{kindAPIService, "", []string{"apiservice", "apiservices", "apiservice.apiregistration.k8s.io", "apiservices.apiregistration.k8s.io"}},
	{kindSecret, "", []string{"secret", "secrets"}},
}

// acceptedKinds says, for an error message, what inspect accepts.
func acceptedKinds() string {
	var out []string
	for _, k := range inspectKinds {
		s := strings.ToLower(k.kind) + "/NAME"
		if k.short != "" {
			s += " (or " + k.short + "/NAME)"
		}
		if k.kind == kindSecret {
			s = "secret NAME (in the namespace of -n)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// InspectTarget is the object `kubectl certapi inspect` was asked about.
type InspectTarget struct {
	// Kind is the API's kind (ValidatingWebhookConfiguration, MutatingWebhookConfiguration,
	// CustomResourceDefinition, APIService or Secret).
	Kind string
	Name string
}

// ParseInspectTarget reads inspect's arguments: TYPE/NAME or TYPE NAME, TYPE as kubectl users type it
// (case-insensitive; singular, plural, short name or qualified with its API group).
func ParseInspectTarget(args []string) (InspectTarget, error) {
	var typ, name string
	switch {
	case len(args) == 0:
		return InspectTarget{}, fmt.Errorf("what to inspect is required: one of %s", acceptedKinds())
	case len(args) == 1 && strings.Contains(args[0], "/"):
		typ, name, _ = strings.Cut(args[0], "/")
	case len(args) == 1:
		return InspectTarget{}, fmt.Errorf("cannot inspect %q: give TYPE/NAME or TYPE NAME, TYPE one of %s", args[0], acceptedKinds())
	case len(args) == 2 && !strings.Contains(args[0], "/"):
		typ, name = args[0], args[1]
	default:
		return InspectTarget{}, fmt.Errorf("inspect takes one object, as TYPE/NAME or TYPE NAME; got %q", strings.Join(args, " "))
	}
	if name == "" || strings.Contains(name, "/") {
		return InspectTarget{}, fmt.Errorf("cannot inspect %q: the NAME after the TYPE must be one object's name", strings.Join(args, " "))
	}
	want := strings.ToLower(typ)
	for _, k := range inspectKinds {
		for _, n := range k.names {
			if n == want {
				return InspectTarget{Kind: k.kind, Name: name}, nil
			}
		}
	}
	return InspectTarget{}, fmt.Errorf("cannot inspect a %q: accepted are %s", typ, acceptedKinds())
}

// Modes of reaching endpoints.
const (
	modePortForward = "port-forward"
	modeDirect      = "direct"
)

// stateNotInspected is an endpoint inspect could not dial in port-forward mode: it names no Pod.
const stateNotInspected = "NotInspected"

// ServedInspection is what `kubectl certapi inspect KIND/NAME` reports of a webhook configuration, CRD or
// APIService: for each caBundle slot that names a Service, what each ready endpoint presents and whether
// the object's own caBundle verifies it for the name kube-apiserver checks. -o json|yaml prints it as is;
// fields are only ever added. It holds no key material: certificates are described, never printed.
type ServedInspection struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Time is when the endpoints were dialled.
	Time time.Time `json:"time"`
	// Mode is how they were reached: "port-forward" (through kube-apiserver's pods/portforward to each
	// endpoint's Pod) or "direct" (--direct: the endpoint's address).
	Mode string `json:"mode"`
	// OptedIn says the object is annotated certapi.dev/inject-ca-bundle: "true". Without it certapi
	// neither injects nor checks it; inspect still verifies against the caBundle it holds.
	OptedIn bool `json:"optedIn"`
	// Slots are its caBundle slots that name a Service, in the object's order.
	Slots []SlotInspection `json:"slots"`
	// Notes say what was left out and why (a webhook with a url, a local APIService).
	Notes []string `json:"notes,omitempty"`
}

// SlotInspection is one caBundle slot: a webhook of a webhook configuration, a CRD's conversion
// webhook, an APIService.
type SlotInspection struct {
	// Webhook is the webhook's name; empty for a CRD or an APIService.
	Webhook string `json:"webhook,omitempty"`
	// Service is what the slot names; ServerName the name kube-apiserver checks, <service>.<namespace>.svc.
	Service    ServiceReport `json:"service"`
	ServerName string        `json:"serverName"`
	// CABundle are the CAs of the slot's caBundle as the object holds it now; CABundleError says why
	// it could not be read (empty, not PEM).
	CABundle      []BundleCA `json:"caBundle"`
	CABundleError string     `json:"caBundleError,omitempty"`
	// State is the worst state of its endpoints (as certapi's check orders them), or NoEndpoints, with
	// Message saying what is missing.
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
	// Endpoints are the Service's ready endpoints, by address.
	Endpoints []EndpointInspection `json:"endpoints"`
	// Verifier is what certapi's leader last published about this slot.
	Verifier VerifierView `json:"verifier"`
}

// ServiceReport names a Service and the port a slot calls.
type ServiceReport struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Port      int32  `json:"port"`
}

// BundleCA is one CA certificate of a caBundle.
type BundleCA struct {
	Subject      string    `json:"subject"`
	SerialNumber string    `json:"serialNumber"`
	SubjectKeyID string    `json:"subjectKeyID,omitempty"`
	NotAfter     time.Time `json:"notAfter"`
	// Role is its role in certapi's CA (Active, Next, Retiring), when it is one of certapi's CAs.
	Role string `json:"role,omitempty"`
}

// EndpointInspection is what one endpoint presents.
type EndpointInspection struct {
	// Address is host:port, from the Service's EndpointSlices.
	Address string `json:"address"`
	// Pod is the endpoint's Pod (namespace/name) from its EndpointSlice targetRef, when it names one.
	Pod string `json:"pod,omitempty"`
	// State is pkg/servedcert's classification against the slot's caBundle (Verified, ExpiringSoon,
	// Untrusted, NameMismatch, Expired, HandshakeFailed, Unreachable), or NotInspected for an endpoint
	// without a Pod in port-forward mode.
	State string `json:"state"`
	// Message says what was found: which CA verified the chain, or why none did.
	Message string `json:"message"`
	// VerifiedBy is the CA of the caBundle that verifies the presented chain, when one does.
	VerifiedBy *BundleCA `json:"verifiedBy,omitempty"`
	// Chain is the presented chain, leaf first.
	Chain []CertificateInfo `json:"chain,omitempty"`
}

// VerifierView is certapi's own last view of a slot: CertificateAuthority/default status.served and the
// Serving condition of the ServingCertRequests for the slot's Service.
type VerifierView struct {
	// State is the slot's state in status.served.worstTargets; empty when it is not listed there.
	State string `json:"state,omitempty"`
	// Detail says, in words, what status.served says of the slot.
	Detail string `json:"detail"`
	// Serving is the Serving condition of each ServingCertRequest of the Service's namespace whose
	// spec.serviceName is the Service.
	Serving []ServingView `json:"serving,omitempty"`
}

// ServingView is one ServingCertRequest's Serving condition.
type ServingView struct {
	Request string `json:"request"`
	// Status is True, False or Unknown; "" when the request has no Serving condition.
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// servedSlot is a caBundle slot that names a Service, as read from its object.
type servedSlot struct {
	webhook  string
	service  servedcert.ServiceRef
	caBundle []byte
}

// webhookSlots are a webhook configuration's entries that name a Service; notes the ones with a url.
func webhookSlots(names []string, configs []admissionregistrationv1.WebhookClientConfig) (slots []servedSlot, notes []string) {
	for i, c := range configs {
		if c.Service == nil {
			notes = append(notes, fmt.Sprintf("webhook %s calls a url, not a Service: not inspected", names[i]))
			continue
		}
		slots = append(slots, servedSlot{webhook: names[i], service: servedcert.NewServiceRef(c.Service.Namespace, c.Service.Name, c.Service.Port), caBundle: c.CABundle})
	}
	if len(configs) == 0 {
		notes = append(notes, "it has no webhooks")
	}
	return slots, notes
}

// ServedSlots returns the caBundle slots of obj (a Validating- or MutatingWebhookConfiguration, a
// CustomResourceDefinition or an APIService) that name a Service, and notes on what has none.
func servedSlots(obj metav1.Object) (slots []servedSlot, notes []string) {
	switch o := obj.(type) {
	case *admissionregistrationv1.ValidatingWebhookConfiguration:
		names, configs := make([]string, len(o.Webhooks)), make([]admissionregistrationv1.WebhookClientConfig, len(o.Webhooks))
		for i, w := range o.Webhooks {
			names[i], configs[i] = w.Name, w.ClientConfig
		}
		return webhookSlots(names, configs)
	case *admissionregistrationv1.MutatingWebhookConfiguration:
		names, configs := make([]string, len(o.Webhooks)), make([]admissionregistrationv1.WebhookClientConfig, len(o.Webhooks))
		for i, w := range o.Webhooks {
			names[i], configs[i] = w.Name, w.ClientConfig
		}
		return webhookSlots(names, configs)
	case *apiextensionsv1.CustomResourceDefinition:
		conv := o.Spec.Conversion
		switch {
		case conv == nil || conv.Strategy != apiextensionsv1.WebhookConverter:
			return nil, []string{"its conversion strategy is not Webhook: it calls no server"}
		case conv.Webhook == nil || conv.Webhook.ClientConfig == nil:
			return nil, []string{"spec.conversion.webhook.clientConfig is not set"}
		case conv.Webhook.ClientConfig.Service == nil:
			return nil, []string{"its conversion webhook calls a url, not a Service: not inspected"}
		}
		s := conv.Webhook.ClientConfig.Service
		return []servedSlot{{service: servedcert.NewServiceRef(s.Namespace, s.Name, s.Port), caBundle: conv.Webhook.ClientConfig.CABundle}}, nil
	case *apiregistrationv1.APIService:
		switch {
		case o.Spec.Service == nil:
			return nil, []string{"it is a local APIService (no spec.service): kube-apiserver serves it itself"}
		case o.Spec.InsecureSkipTLSVerify:
			notes = append(notes, "spec.insecureSkipTLSVerify is true: kube-apiserver verifies nothing it presents")
		}
		s := o.Spec.Service
		return []servedSlot{{service: servedcert.NewServiceRef(s.Namespace, s.Name, s.Port), caBundle: o.Spec.CABundle}}, notes
	}
	return nil, []string{fmt.Sprintf("%T has no caBundle slot", obj)}
}

// bundleCAs describes cas, with their roles in certapi's CA (serial to role).
func bundleCAs(cas []*x509.Certificate, roles map[string]string) []BundleCA {
	out := make([]BundleCA, 0, len(cas))
	for _, c := range cas {
		serial := signer.FormatSerialNumber(c.SerialNumber)
		out = append(out, BundleCA{Subject: c.Subject.String(), SerialNumber: serial, SubjectKeyID: signer.FormatKeyID(c.SubjectKeyId),
			NotAfter: c.NotAfter, Role: roles[serial]})
	}
	return out
}

// caRolesBySerial maps each of certapi's CAs' serials to its role.
func caRolesBySerial(ca *certapiv1alpha1.CertificateAuthority) map[string]string {
	roles := map[string]string{}
	if ca == nil {
		return roles
	}
	for _, c := range ca.Status.Certificates {
		roles[c.SerialNumber] = string(c.Role)
	}
	return roles
}

// InspectEndpoint classifies what one endpoint presented (chain, or the probe's error) against the
// slot's bundle, for serverName, at now, as certapi's check does (pkg/servedcert.Classify), and says
// which CA of the bundle verified it or why none did.
func InspectEndpoint(address string, chain []*x509.Certificate, probeErr error, bundle []*x509.Certificate, serverName string, now time.Time, roles map[string]string) EndpointInspection {
	e := EndpointInspection{Address: address}
	if probeErr != nil {
		var te *tunnelError
		if errors.As(probeErr, &te) {
			e.State, e.Message = string(servedcert.Unreachable), te.Error()
			return e
		}
		r := servedcert.ProbeError(probeErr)
		e.State, e.Message = string(r.State), r.Message
		return e
	}
	for _, c := range chain {
		e.Chain = append(e.Chain, *certificateInfo(c))
	}
	r := servedcert.Classify(chain, bundle, serverName, now, 0)
	e.State, e.Message = string(r.State), r.Message
	if r.State != servedcert.Untrusted && r.IssuerSerial != "" {
		for _, ca := range bundleCAs(bundle, roles) {
			if ca.SerialNumber == r.IssuerSerial {
				e.VerifiedBy = &ca
				break
			}
		}
	}
	return e
}

// worstState is the worst of the endpoints' states; NotInspected only when nothing was inspected.
func worstState(eps []EndpointInspection) string {
	worst := ""
	for _, e := range eps {
		switch {
		case e.State == stateNotInspected:
			if worst == "" {
				worst = stateNotInspected
			}
		case worst == "" || worst == stateNotInspected || servedcert.Worse(servedcert.State(e.State), servedcert.State(worst)):
			worst = e.State
		}
	}
	return worst
}

// verifierView is what status.served (nil while the check is off or before its first round) and the
// Serving conditions of requests (those of the Service's namespace) say of a slot.
func verifierView(kind, name, webhook string, svc servedcert.ServiceRef, served *certapiv1alpha1.ServedSummary, caErr error, requests []certapiv1alpha1.ServingCertRequest) VerifierView {
	var v VerifierView
	slot := kind + " " + name
	if webhook != "" {
		slot += " webhook " + webhook
	}
	switch {
	case caErr != nil:
		v.Detail = fmt.Sprintf("%s could not be read: %v", caResource, caErr)
	case served == nil:
		v.Detail = fmt.Sprintf("%s has no status.served: certapi's check is off (--served-check-interval=0) or has not finished its first round", caResource)
	default:
		for _, w := range served.WorstTargets {
			if st, ok := strings.CutPrefix(w, slot+": "); ok {
				v.State = st
				v.Detail = fmt.Sprintf("status.served.worstTargets lists it as %s", st)
			}
		}
		if v.State == "" {
			v.Detail = fmt.Sprintf("not among status.served.worstTargets (%d of %d checked slots Verified): Verified, or not checked "+
				"(certapi checks only objects that opted in and hold its current bundle)", served.Verified, served.Targets)
			if listed := len(served.WorstTargets); int(served.Targets-served.Verified) > listed {
				v.Detail += fmt.Sprintf(", or beyond the %d it lists", listed)
			}
		}
	}
	for _, r := range requests {
		if r.Namespace != svc.Namespace || r.Spec.ServiceName != svc.Name {
			continue
		}
		sv := ServingView{Request: r.Namespace + "/" + r.Name}
		if c := meta.FindStatusCondition(r.Status.Conditions, certapiv1alpha1.ConditionServing); c != nil {
			sv.Status, sv.Reason, sv.Message = string(c.Status), c.Reason, c.Message
		}
		v.Serving = append(v.Serving, sv)
	}
	return v
}

// inspectServedOptions are the flags of inspect for a webhook configuration, CRD or APIService.
type inspectServedOptions struct {
	direct  bool
	timeout time.Duration
}

// readServedObject reads the object t names.
func readServedObject(ctx context.Context, c *clients, t InspectTarget) (metav1.Object, error) {
	switch t.Kind {
	case kindValidatingWebhookConfiguration:
		return c.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, t.Name, metav1.GetOptions{})
	case kindMutatingWebhookConfiguration:
		return c.kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, t.Name, metav1.GetOptions{})
	case kindCustomResourceDefinition:
		return c.extensions.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, t.Name, metav1.GetOptions{})
	case kindAPIService:
		return c.aggregator.ApiregistrationV1().APIServices().Get(ctx, t.Name, metav1.GetOptions{})
	}
	return nil, fmt.Errorf("cannot inspect a %s for served certificates", t.Kind)
}

// inspectServed reads the object, resolves each slot's Service as certapi's check does, dials every
// ready endpoint (through pods/portforward, or directly with o.direct) and classifies what it presents.
func inspectServed(ctx context.Context, c *clients, t InspectTarget, o inspectServedOptions) (ServedInspection, error) {
	obj, err := readServedObject(ctx, c, t)
	if err != nil {
		return ServedInspection{}, err // the API's error, printed as kubectl does
	}
	r := ServedInspection{Kind: t.Kind, Name: t.Name, Time: time.Now(), Mode: modePortForward, Slots: []SlotInspection{},
		OptedIn: obj.GetAnnotations()[certapiv1alpha1.AnnotationInjectCABundle] == "true"}
	if o.direct {
		r.Mode = modeDirect
	}
	slots, notes := servedSlots(obj)
	r.Notes = notes
	ca, caErr := c.certapi.CertapiV1alpha1().CertificateAuthorities().Get(ctx, certapiv1alpha1.CertificateAuthorityName, metav1.GetOptions{})
	var served *certapiv1alpha1.ServedSummary
	if caErr == nil {
		served = ca.Status.Served
	} else {
		ca = nil
	}
	roles := caRolesBySerial(ca)
	pods := &podProber{config: c.config, kube: c.kube}
	requests := map[string][]certapiv1alpha1.ServingCertRequest{}
	for _, s := range slots {
		si := SlotInspection{Webhook: s.webhook, Service: ServiceReport{Namespace: s.service.Namespace, Name: s.service.Name, Port: s.service.Port},
			ServerName: s.service.ServerName(), CABundle: []BundleCA{}, Endpoints: []EndpointInspection{}}
		cas, err := signer.ParseBundle(s.caBundle)
		switch {
		case len(s.caBundle) == 0:
			si.CABundleError = "the caBundle is empty: kube-apiserver verifies the server against its own system roots"
		case err != nil:
			si.CABundleError = err.Error()
		default:
			si.CABundle = bundleCAs(cas, roles)
		}

		svc, err := c.kube.CoreV1().Services(s.service.Namespace).Get(ctx, s.service.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			svc = nil
		} else if err != nil {
			return r, fmt.Errorf("reading Service %s/%s: %w", s.service.Namespace, s.service.Name, err)
		}
		var endpointSlices []*discoveryv1.EndpointSlice
		if svc != nil {
			list, err := c.kube.DiscoveryV1().EndpointSlices(s.service.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + s.service.Name})
			if err != nil {
				return r, fmt.Errorf("listing the EndpointSlices of Service %s/%s: %w", s.service.Namespace, s.service.Name, err)
			}
			for i := range list.Items {
				endpointSlices = append(endpointSlices, &list.Items[i])
			}
		}
		eps, why := servedcert.ResolveEndpoints(s.service, svc, endpointSlices)
		if why != "" {
			si.State, si.Message = string(servedcert.NoEndpoints), why
		}
		for _, ep := range eps {
			var ei EndpointInspection
			switch {
			case o.direct:
				chain, err := servedcert.Probe(ctx, ep.Address, si.ServerName, o.timeout)
				ei = InspectEndpoint(ep.Address, chain, err, cas, si.ServerName, time.Now(), roles)
			case ep.Pod == nil:
				ei = EndpointInspection{Address: ep.Address, State: stateNotInspected,
					Message: "its EndpointSlice names no Pod (targetRef) to port-forward to: run inspect with --direct where " + ep.Address + " can be reached (in the cluster, on a node)"}
			default:
				chain, err := pods.probe(ctx, *ep.Pod, ep.Port, si.ServerName, o.timeout)
				ei = InspectEndpoint(ep.Address, chain, err, cas, si.ServerName, time.Now(), roles)
			}
			if ep.Pod != nil {
				ei.Pod = ep.Pod.String()
			}
			si.Endpoints = append(si.Endpoints, ei)
		}
		if why == "" {
			si.State = worstState(si.Endpoints)
		}

		reqs, ok := requests[s.service.Namespace]
		if !ok {
			list, err := listRequests(ctx, c.certapi, s.service.Namespace)
			if err != nil {
				r.Notes = append(r.Notes, fmt.Sprintf("the ServingCertRequests of namespace %s could not be listed: %v", s.service.Namespace, err))
			}
			reqs, requests[s.service.Namespace] = list, list
		}
		si.Verifier = verifierView(t.Kind, t.Name, s.webhook, s.service, served, caErr, reqs)
		r.Slots = append(r.Slots, si)
	}
	return r, nil
}

// PrintServedInspection writes a served inspection for people.
func PrintServedInspection(out io.Writer, r ServedInspection) error {
	fmt.Fprintf(out, "%s %s", r.Kind, r.Name)
	if !r.OptedIn {
		fmt.Fprintf(out, " (not annotated %s: \"true\"; certapi neither injects nor checks it)", certapiv1alpha1.AnnotationInjectCABundle)
	}
	fmt.Fprintf(out, "\nEndpoints reached %s at %s.\n", map[string]string{modeDirect: "directly (--direct)", modePortForward: "through kube-apiserver's pods/portforward"}[r.Mode], formatTime(r.Time))
	for _, n := range r.Notes {
		fmt.Fprintf(out, "Note: %s\n", n)
	}
	if len(r.Slots) == 0 {
		_, err := fmt.Fprintln(out, "Nothing to inspect: no caBundle slot names a Service.")
		return err
	}
	for _, s := range r.Slots {
		fmt.Fprintln(out)
		title := "Service"
		if s.Webhook != "" {
			title = "Webhook " + s.Webhook + ": Service"
		}
		fmt.Fprintf(out, "%s %s/%s port %d (server name %s): %s\n", title, s.Service.Namespace, s.Service.Name, s.Service.Port, s.ServerName, orNone(s.State))
		if s.Message != "" {
			fmt.Fprintf(out, "  %s\n", s.Message)
		}
		if s.CABundleError != "" {
			fmt.Fprintf(out, "  caBundle: %s\n", s.CABundleError)
		} else {
			fmt.Fprintln(out, "  caBundle:")
			for _, ca := range s.CABundle {
				role := ""
				if ca.Role != "" {
					role = ", certapi's " + ca.Role + " CA"
				}
				fmt.Fprintf(out, "    CA %s %q, valid until %s%s\n", ca.SerialNumber, ca.Subject, formatTime(ca.NotAfter), role)
			}
		}
		for _, e := range s.Endpoints {
			pod := ""
			if e.Pod != "" {
				pod = " (pod " + e.Pod + ")"
			}
			fmt.Fprintf(out, "  Endpoint %s%s: %s\n", e.Address, pod, e.State)
			fmt.Fprintf(out, "    %s\n", e.Message)
			if e.VerifiedBy != nil {
				fmt.Fprintf(out, "    verified by the caBundle's CA %s %q\n", e.VerifiedBy.SerialNumber, e.VerifiedBy.Subject)
			}
			if len(e.Chain) > 0 {
				w := printers.GetNewTabWriter(out)
				for i, c := range e.Chain {
					label := "leaf"
					if i > 0 {
						label = fmt.Sprintf("chain[%d]", i)
					}
					fmt.Fprintf(w, "    %s\tsubject %s\n", label, orNone(c.Subject))
					fmt.Fprintf(w, "    \tissuer %s\n", orNone(c.Issuer))
					fmt.Fprintf(w, "    \tserial %s\n", c.SerialNumber)
					if i == 0 || len(c.DNSNames)+len(c.IPAddresses) > 0 {
						fmt.Fprintf(w, "    \tSANs %s\n", orNone(strings.Join(append(append([]string{}, c.DNSNames...), c.IPAddresses...), ", ")))
					}
					fmt.Fprintf(w, "    \tvalid %s to %s (%s left)\n", formatTime(c.NotBefore), formatTime(c.NotAfter), timeLeft(r.Time, c.NotAfter))
				}
				if err := w.Flush(); err != nil {
					return err
				}
			}
		}
		fmt.Fprintf(out, "  certapi's check: %s\n", s.Verifier.Detail)
		for _, sv := range s.Verifier.Serving {
			if sv.Status == "" {
				fmt.Fprintf(out, "  ServingCertRequest %s: no Serving condition\n", sv.Request)
				continue
			}
			fmt.Fprintf(out, "  ServingCertRequest %s: Serving=%s (%s): %s\n", sv.Request, sv.Status, sv.Reason, sv.Message)
		}
	}
	return nil
}
