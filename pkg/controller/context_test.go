package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

func TestTrimCertapi(t *testing.T) {
	req := &certapiv1alpha1.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:          "r",
			Labels:        map[string]string{"app": "x"},
			Annotations:   map[string]string{corev1.LastAppliedConfigAnnotation: "{...}", "keep": "me"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Status: certapiv1alpha1.ServingCertRequestStatus{Certificate: "cert", CABundle: "bundle", SerialNumber: "01"},
	}
	if _, err := trimCertapi(req); err != nil {
		t.Fatal(err)
	}
	if req.ManagedFields != nil || req.Status.Certificate != "" || req.Status.CABundle != "" {
		t.Errorf("not trimmed: %+v", req)
	}
	if _, ok := req.Annotations[corev1.LastAppliedConfigAnnotation]; ok || req.Annotations["keep"] != "me" || req.Labels["app"] != "x" {
		t.Errorf("annotations %v, labels %v: want only last-applied-configuration dropped", req.Annotations, req.Labels)
	}
	if req.Status.SerialNumber != "01" {
		t.Errorf("status.serialNumber dropped")
	}

	only := &certapiv1alpha1.CertificateAuthority{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{corev1.LastAppliedConfigAnnotation: "{}"}}}
	if _, err := trimCertapi(only); err != nil {
		t.Fatal(err)
	}
	if only.Annotations != nil {
		t.Errorf("annotations %v, want nil", only.Annotations)
	}
}
