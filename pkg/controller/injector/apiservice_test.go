package injector

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

func TestObserveAPIService(t *testing.T) {
	svcRef := &apiregistrationv1.ServiceReference{Namespace: "ns", Name: "svc", Port: ptr[int32](443)}
	local := &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: "v1.foo.example.com"}}
	if obs := observeAPIService(local); !strings.Contains(obs.Skip, "local") {
		t.Errorf("local: skip %q", obs.Skip)
	}
	insecure := &apiregistrationv1.APIService{Spec: apiregistrationv1.APIServiceSpec{Service: svcRef, InsecureSkipTLSVerify: true}}
	if obs := observeAPIService(insecure); !strings.Contains(obs.Skip, "insecureSkipTLSVerify") {
		t.Errorf("insecure: skip %q", obs.Skip)
	}
	remote := &apiregistrationv1.APIService{Spec: apiregistrationv1.APIServiceSpec{Service: svcRef}}
	if obs := observeAPIService(remote); obs.Skip != "" || len(obs.Slots) != 1 || obs.Slots[0].Path != "/spec/caBundle" {
		t.Errorf("remote: %+v", obs)
	}
}
