package install

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	applyv1alpha1 "github.com/certapi/certapi/pkg/generated/applyconfiguration/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
)

// TestModelNamesMatchTheApplySchema guards the OpenAPI model package: the generated apply configurations
// find their types' schemas by model name, and a mismatch breaks the fake clientset and typed apply.
func TestModelNamesMatchTheApplySchema(t *testing.T) {
	c := fake.NewClientset()
	apply := applyv1alpha1.ServingCertRequest("r", "ns").WithSpec(applyv1alpha1.ServingCertRequestSpec().WithServiceName("svc"))
	got, err := c.CertapiV1alpha1().ServingCertRequests("ns").Apply(context.Background(), apply, metav1.ApplyOptions{FieldManager: "test"})
	if err != nil {
		t.Fatalf("apply through the fake clientset: %v", err)
	}
	if got.Spec.ServiceName != "svc" {
		t.Fatalf("serviceName = %q", got.Spec.ServiceName)
	}
}

// TestDefaultsAndConversion decodes a minimal v1alpha1 object into the internal version with defaults.
func TestDefaultsAndConversion(t *testing.T) {
	scheme := runtime.NewScheme()
	Install(scheme)
	codecs := serializer.NewCodecFactory(scheme)
	obj, _, err := codecs.UniversalDecoder(certapi.SchemeGroupVersion).Decode([]byte(`{"apiVersion":"certapi.dev/v1alpha1","kind":"ServingCertRequest","metadata":{"name":"r"},"spec":{"serviceName":"svc"}}`), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	scr := obj.(*certapi.ServingCertRequest)
	if scr.Spec.Duration == nil || scr.Spec.Duration.Duration != v1alpha1.DefaultDuration || scr.Spec.KeyAlgorithm != certapi.KeyAlgorithmECDSAP256 || scr.Spec.RenewBefore != nil {
		t.Fatalf("defaults: %+v", scr.Spec)
	}
}
