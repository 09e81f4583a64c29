package servedcert

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

func TestResolveEndpoints(t *testing.T) {
	ref := ServiceRef{Namespace: "tenant", Name: "hook", Port: 443}
	svc := func(ports ...corev1.ServicePort) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "hook"}, Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: ports}}
	}
	https := corev1.ServicePort{Name: "https", Port: 443}
	unnamed := corev1.ServicePort{Port: 443}
	ep := func(ready *bool, addrs ...string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: addrs, Conditions: discoveryv1.EndpointConditions{Ready: ready}}
	}
	pod := func(e discoveryv1.Endpoint, kind, ns, name string) discoveryv1.Endpoint {
		e.TargetRef = &corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name}
		return e
	}
	slice := func(typ discoveryv1.AddressType, portName *string, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant"}, AddressType: typ,
			Ports: []discoveryv1.EndpointPort{{Name: portName, Port: ptr.To(port)}}, Endpoints: eps}
	}
	for _, tc := range []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		want   []string
		pods   []string // "" for an endpoint without a Pod
		why    string
	}{
		{name: "no Service", why: "Service tenant/hook does not exist"},
		{name: "no such port", svc: svc(corev1.ServicePort{Name: "https", Port: 8443}), why: "has no port 443"},
		{name: "port by name, target port from the slice", svc: svc(https, corev1.ServicePort{Name: "metrics", Port: 9090}),
			slices: []*discoveryv1.EndpointSlice{
				slice(discoveryv1.AddressTypeIPv4, ptr.To("https"), 8443, ep(nil, "10.0.0.2"), ep(ptr.To(true), "10.0.0.1")),
				slice(discoveryv1.AddressTypeIPv4, ptr.To("metrics"), 9090, ep(nil, "10.0.0.3")),
			},
			want: []string{"10.0.0.1:8443", "10.0.0.2:8443"}, pods: []string{"", ""}},
		{name: "not ready endpoints are left out", svc: svc(https),
			slices: []*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, ptr.To("https"), 8443, ep(ptr.To(false), "10.0.0.1"), ep(nil, "10.0.0.2"))},
			want:   []string{"10.0.0.2:8443"}, pods: []string{""}},
		{name: "only not ready endpoints", svc: svc(https),
			slices: []*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, ptr.To("https"), 8443, ep(ptr.To(false), "10.0.0.1"))},
			why:    "no ready endpoint for port 443 (https)"},
		{name: "unnamed port", svc: svc(unnamed),
			slices: []*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, ptr.To(""), 9443, ep(nil, "10.0.0.1"))},
			want:   []string{"10.0.0.1:9443"}, pods: []string{""}},
		{name: "IPv6 and FQDN slices", svc: svc(unnamed),
			slices: []*discoveryv1.EndpointSlice{
				slice(discoveryv1.AddressTypeIPv6, ptr.To(""), 9443, ep(nil, "fd00::1")),
				slice(discoveryv1.AddressTypeFQDN, ptr.To(""), 9443, ep(nil, "example.com")),
			},
			want: []string{"[fd00::1]:9443"}, pods: []string{""}},
		{name: "the same endpoint in two slices once", svc: svc(unnamed),
			slices: []*discoveryv1.EndpointSlice{
				slice(discoveryv1.AddressTypeIPv4, ptr.To(""), 9443, pod(ep(nil, "10.0.0.1"), "Pod", "", "hook-0")),
				slice(discoveryv1.AddressTypeIPv4, ptr.To(""), 9443, ep(nil, "10.0.0.1")),
			},
			want: []string{"10.0.0.1:9443"}, pods: []string{"tenant/hook-0"}},
		{name: "Pods from targetRef; other kinds are no Pod", svc: svc(https),
			slices: []*discoveryv1.EndpointSlice{slice(discoveryv1.AddressTypeIPv4, ptr.To("https"), 8443,
				pod(ep(nil, "10.0.0.1"), "Pod", "tenant", "hook-a"), pod(ep(nil, "10.0.0.2"), "Node", "", "node-1"), ep(nil, "10.0.0.3"))},
			want: []string{"10.0.0.1:8443", "10.0.0.2:8443", "10.0.0.3:8443"}, pods: []string{"tenant/hook-a", "", ""}},
		{name: "no slices", svc: svc(https), why: "no ready endpoint"},
		{name: "ExternalName", svc: &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"}},
			want: []string{"localhost:443"}, pods: []string{""}},
		{name: "ExternalName without a name", svc: &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName}},
			why: "no externalName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eps, why := ResolveEndpoints(ref, tc.svc, tc.slices)
			addrs, why2 := Resolve(ref, tc.svc, tc.slices)
			var got, pods []string
			for _, e := range eps {
				got = append(got, e.Address)
				p := ""
				if e.Pod != nil {
					p = (types.NamespacedName(*e.Pod)).String()
				}
				pods = append(pods, p)
			}
			if !slices.Equal(got, tc.want) || !slices.Equal(addrs, tc.want) {
				t.Errorf("addresses %v (Resolve: %v), want %v", got, addrs, tc.want)
			}
			if !slices.Equal(pods, tc.pods) {
				t.Errorf("pods %q, want %q", pods, tc.pods)
			}
			if why != why2 || (tc.why == "" && why != "") || !strings.Contains(why, tc.why) {
				t.Errorf("why %q (Resolve: %q), want %q", why, why2, tc.why)
			}
		})
	}
}

func TestServiceRefServerName(t *testing.T) {
	if got := (ServiceRef{Namespace: "team", Name: "hook", Port: 443}).ServerName(); got != "hook.team.svc" {
		t.Errorf("ServerName %q, want hook.team.svc", got)
	}
}
