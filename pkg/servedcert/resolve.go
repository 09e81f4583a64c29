package servedcert

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

// DefaultServicePort is the port of a service reference that names none, as kube-apiserver defaults it
// for webhooks, conversion webhooks and APIServices.
const DefaultServicePort int32 = 443

// ServiceRef is the Service a caBundle slot's clientConfig (or an APIService's spec.service) names: what
// kube-apiserver dials, trusting that slot's bundle.
type ServiceRef struct {
	Namespace, Name string
	// Port is the Service's port (DefaultServicePort when the reference names none).
	Port int32
}

// NewServiceRef is the ServiceRef of a reference with an optional port: DefaultServicePort when it names
// none, as kube-apiserver defaults it.
func NewServiceRef(namespace, name string, port *int32) ServiceRef {
	p := DefaultServicePort
	if port != nil {
		p = *port
	}
	return ServiceRef{Namespace: namespace, Name: name, Port: p}
}

// ServerName is the TLS server name kube-apiserver checks for the Service: <name>.<namespace>.svc.
func (r ServiceRef) ServerName() string { return r.Name + "." + r.Namespace + ".svc" }

// Endpoint is one address kube-apiserver may dial for a ServiceRef.
type Endpoint struct {
	// Address is host:port: the endpoint's first address on the Service port's target port, or an
	// ExternalName Service's externalName on the reference's port.
	Address string
	// Port is the port of Address.
	Port int32
	// Pod is the Pod the EndpointSlice says serves the endpoint (its targetRef), when it names one:
	// what a client outside the cluster reaches through kube-apiserver's pods/portforward.
	Pod *types.NamespacedName
}

// Resolve says what kube-apiserver would dial for ref, given the Service (nil when it does not exist)
// and its EndpointSlices: every ready endpoint's first address on the port the EndpointSlices give for
// the Service port numbered ref.Port (matched by the Service port's name, as kube-apiserver's
// ResolveEndpoint does with --enable-aggregator-routing, and as kube-proxy does behind the ClusterIP
// without it), sorted; for an ExternalName Service, its externalName on ref.Port (what kube-apiserver
// dials without aggregator routing). When there is nothing to dial, addrs is empty and why says what is
// missing.
func Resolve(ref ServiceRef, svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice) (addrs []string, why string) {
	eps, why := ResolveEndpoints(ref, svc, endpointSlices)
	for _, e := range eps {
		addrs = append(addrs, e.Address)
	}
	return addrs, why
}

// ResolveEndpoints is Resolve with each endpoint's port and Pod (from the EndpointSlice's targetRef),
// sorted by address.
func ResolveEndpoints(ref ServiceRef, svc *corev1.Service, endpointSlices []*discoveryv1.EndpointSlice) (eps []Endpoint, why string) {
	name := ref.Namespace + "/" + ref.Name
	if svc == nil {
		return nil, fmt.Sprintf("Service %s does not exist", name)
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		if svc.Spec.ExternalName == "" {
			return nil, fmt.Sprintf("Service %s is of type ExternalName with no externalName", name)
		}
		return []Endpoint{{Address: net.JoinHostPort(svc.Spec.ExternalName, strconv.Itoa(int(ref.Port))), Port: ref.Port}}, ""
	}
	var svcPort *corev1.ServicePort
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Port == ref.Port {
			svcPort = &svc.Spec.Ports[i]
			break
		}
	}
	if svcPort == nil {
		return nil, fmt.Sprintf("Service %s has no port %d", name, ref.Port)
	}
	seen := map[string]bool{}
	for _, s := range endpointSlices {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		for _, p := range s.Ports {
			if p.Port == nil || (p.Name == nil && svcPort.Name != "") || (p.Name != nil && *p.Name != svcPort.Name) {
				continue
			}
			for _, ep := range s.Endpoints {
				if (ep.Conditions.Ready != nil && !*ep.Conditions.Ready) || len(ep.Addresses) == 0 {
					continue
				}
				addr := net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(*p.Port)))
				if seen[addr] {
					continue
				}
				seen[addr] = true
				e := Endpoint{Address: addr, Port: *p.Port}
				if r := ep.TargetRef; r != nil && r.Kind == "Pod" && r.Name != "" {
					ns := r.Namespace
					if ns == "" {
						ns = s.Namespace
					}
					e.Pod = &types.NamespacedName{Namespace: ns, Name: r.Name}
				}
				eps = append(eps, e)
			}
		}
	}
	if len(eps) == 0 {
		port := strconv.Itoa(int(ref.Port))
		if svcPort.Name != "" {
			port += " (" + svcPort.Name + ")"
		}
		return nil, fmt.Sprintf("Service %s has no ready endpoint for port %s", name, port)
	}
	slices.SortFunc(eps, func(a, b Endpoint) int { return strings.Compare(a.Address, b.Address) })
	return eps, ""
}
