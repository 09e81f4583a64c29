package controller

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

func TestTrimCertapi(t *testing.T) {
	deleting := metav1.NewTime(time.Unix(1700000000, 0))
	// tenantMeta is what a writer may put into metadata, as large as validation allows.
	tenantMeta := func() metav1.ObjectMeta {
		return metav1.ObjectMeta{
			Name: "r", Namespace: "team-a", UID: "u", ResourceVersion: "7", Generation: 3, DeletionTimestamp: &deleting,
			Labels: map[string]string{"app": "x"},
			Annotations: map[string]string{
				corev1.LastAppliedConfigAnnotation: "{...}",
				"tenant.example.com/blob":          strings.Repeat("x", 30000),
				"certapi.dev/servingcertrequest":   "r",
			},
			Finalizers:      []string{"example.com/f"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "owner", UID: "o"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		}
	}
	// kept is what the controllers read of any certapi object's metadata.
	kept := metav1.ObjectMeta{Name: "r", Namespace: "team-a", UID: "u", ResourceVersion: "7", Generation: 3, DeletionTimestamp: &deleting}
	cases := []struct {
		name string
		in   any
		want any
	}{
		{
			name: "ServingCertRequest: metadata, certificate and bundle dropped; spec and the rest of status kept",
			in: &certapiv1alpha1.ServingCertRequest{
				ObjectMeta: tenantMeta(),
				Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: "svc", DNSNames: []string{"a.team-a.svc"}, ServiceAccountNames: []string{"sa"}, SecretName: "s"},
				Status:     certapiv1alpha1.ServingCertRequestStatus{Certificate: "cert", CABundle: "bundle", SerialNumber: "01", ObservedGeneration: 3},
			},
			want: &certapiv1alpha1.ServingCertRequest{
				ObjectMeta: kept,
				Spec:       certapiv1alpha1.ServingCertRequestSpec{ServiceName: "svc", DNSNames: []string{"a.team-a.svc"}, ServiceAccountNames: []string{"sa"}, SecretName: "s"},
				Status:     certapiv1alpha1.ServingCertRequestStatus{SerialNumber: "01", ObservedGeneration: 3},
			},
		},
		{
			name: "ServingCertRequest: a renewal request is the one annotation kept",
			in: func() *certapiv1alpha1.ServingCertRequest {
				r := &certapiv1alpha1.ServingCertRequest{ObjectMeta: tenantMeta()}
				r.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt] = "2026-12-06T18:00:00Z"
				return r
			}(),
			want: func() *certapiv1alpha1.ServingCertRequest {
				r := &certapiv1alpha1.ServingCertRequest{ObjectMeta: kept}
				r.Annotations = map[string]string{certapiv1alpha1.AnnotationRenewRequestedAt: "2026-12-06T18:00:00Z"}
				return r
			}(),
		},
		{
			name: "CertificateAuthority: metadata dropped, spec and status kept",
			in: &certapiv1alpha1.CertificateAuthority{
				ObjectMeta: tenantMeta(),
				Spec:       certapiv1alpha1.CertificateAuthoritySpec{ForceRotation: "1"},
				Status:     certapiv1alpha1.CertificateAuthorityStatus{CABundle: "bundle"},
			},
			want: &certapiv1alpha1.CertificateAuthority{
				ObjectMeta: kept,
				Spec:       certapiv1alpha1.CertificateAuthoritySpec{ForceRotation: "1"},
				Status:     certapiv1alpha1.CertificateAuthorityStatus{CABundle: "bundle"},
			},
		},
		{
			name: "another type passes untouched",
			in:   &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}}},
			want: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := trimCertapi(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("trimmed to\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// TestTrimCertapiSharesNothing shows that trimming never changes the maps it drops: with the in-process
// list and watch they can be the watch cache's own.
func TestTrimCertapiSharesNothing(t *testing.T) {
	shared := map[string]string{corev1.LastAppliedConfigAnnotation: "{}", "a": "b"}
	req := &certapiv1alpha1.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Annotations: shared, Labels: shared}}
	if _, err := trimCertapi(req); err != nil {
		t.Fatal(err)
	}
	if len(shared) != 2 {
		t.Errorf("the dropped map was changed in place: %v", shared)
	}
}
