package incluster

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	aggregatorfake "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset/fake"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

func TestPublishedCA(t *testing.T) {
	apiService := func(caBundle string) *apiregistrationv1.APIService {
		return &apiregistrationv1.APIService{ObjectMeta: metav1.ObjectMeta{Name: certapiv1alpha1.APIServiceName},
			Spec: apiregistrationv1.APIServiceSpec{CABundle: []byte(caBundle)}}
	}
	tests := []struct {
		name    string
		objects []runtime.Object
		getErr  error
		want    string
		wantErr bool
	}{
		{"no APIService (uninstalled): none", nil, nil, "", false},
		{"APIService as the chart creates it, no bundle: none", []runtime.Object{apiService("")}, nil, "", false},
		{"bundle injected by a certapi: found", []runtime.Object{apiService("-----BEGIN CERTIFICATE-----\n")}, nil, "APIService " + certapiv1alpha1.APIServiceName, false},
		{"read fails: an error, never none", nil, errors.New("connection refused"), "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := aggregatorfake.NewSimpleClientset(tt.objects...)
			if tt.getErr != nil {
				client.PrependReactor("get", "apiservices", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, tt.getErr })
			}
			got, err := PublishedCA(client)(context.Background())
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("PublishedCA = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}
