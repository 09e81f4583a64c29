package injector

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

func TestTrimMetadata(t *testing.T) {
	in := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{Kind: "PartialObjectMetadata"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "x", Namespace: "ns", UID: "u", ResourceVersion: "5", Labels: map[string]string{"a": "b"},
			Annotations: map[string]string{
				certapiv1alpha1.AnnotationInjectCABundle: "true", "cert-manager.io/inject-ca-from": "ns/c",
				"kubectl.kubernetes.io/last-applied-configuration": strings.Repeat("x", 1<<16),
			},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}},
		},
	}
	out, err := trimMetadata(in)
	if err != nil {
		t.Fatal(err)
	}
	m := out.(*metav1.PartialObjectMetadata)
	if m.Name != "x" || m.Namespace != "ns" || storeKey(m) != "ns/x" || m.UID != "u" || m.ResourceVersion != "5" || m.Labels != nil || m.ManagedFields != nil {
		t.Errorf("trimmed = %+v", m.ObjectMeta)
	}
	if len(m.Annotations) != 3 || m.Annotations[certapiv1alpha1.AnnotationInjectCABundle] != "true" || m.Annotations["cert-manager.io/inject-ca-from"] != "ns/c" || m.Annotations[annotationsHashKey] == "" {
		t.Errorf("annotations = %v", m.Annotations)
	}
	in.Annotations["other"] = "changed"
	out2, _ := trimMetadata(in)
	if out2.(*metav1.PartialObjectMetadata).Annotations[annotationsHashKey] == m.Annotations[annotationsHashKey] {
		t.Error("annotation hash did not change with an annotation")
	}
	notOptedIn := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "y", Annotations: map[string]string{"a": "b"}}}
	out3, _ := trimMetadata(notOptedIn)
	if out3.(*metav1.PartialObjectMetadata).Annotations != nil {
		t.Errorf("not opted in: annotations %v", out3.(*metav1.PartialObjectMetadata).Annotations)
	}
}
