package issuer

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

func TestRequestFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec certapiv1alpha1.ServingCertRequestSpec
		want Request
	}{{
		name: "defaults",
		spec: certapiv1alpha1.ServingCertRequestSpec{ServiceName: "web"},
		want: Request{Namespace: "ns", Name: "req", ServiceName: "web", Duration: certapiv1alpha1.DefaultDuration},
	}, {
		name: "as the spec says",
		spec: certapiv1alpha1.ServingCertRequestSpec{
			ServiceName: "web",
			DNSNames:    []string{"*.web.ns.svc"},
			Duration:    &metav1.Duration{Duration: 48 * time.Hour},
			RenewBefore: &metav1.Duration{Duration: 12 * time.Hour},
		},
		want: Request{Namespace: "ns", Name: "req", ServiceName: "web", DNSNames: []string{"*.web.ns.svc"},
			Duration: 48 * time.Hour, RenewBefore: 12 * time.Hour},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RequestFor("ns", "req", &tc.spec); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("RequestFor = %+v, want %+v", got, tc.want)
			}
		})
	}
}
