package install

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

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
