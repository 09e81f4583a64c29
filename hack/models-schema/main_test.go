package main

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	applyv1alpha1 "github.com/certapi/certapi/pkg/generated/applyconfiguration/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/generated/clientset/versioned/fake"
)

// TestModelNamesMatchTheApplySchema guards the OpenAPI model package: the generated apply configurations
// find their types' schemas (which this command prints for applyconfiguration-gen) by model name, and a
// mismatch breaks the fake clientset and typed apply. It lives here, in the main module, rather than
// beside the types: pkg/apis is a module of its own that does not require pkg/generated.
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
