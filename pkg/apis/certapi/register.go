package certapi

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of certapi.
const GroupName = "certapi.dev"

// SchemeGroupVersion is the internal version of the group.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

// Kind qualifies a kind with this group.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource qualifies a resource name with this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder collects the functions that add the internal types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the internal types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&ServingCertRequest{},
		&ServingCertRequestList{},
		&ServingCert{},
		&CertificateAuthority{},
		&CertificateAuthorityList{},
		&CertificateAuthorityImport{},
	)
	return nil
}

// ConditionReady is the condition type that says whether a request's certificate is current, or whether
// the CA is serving.
const ConditionReady = "Ready"

// ConditionRotating is the condition type that says where a CertificateAuthority's rotation stands.
const ConditionRotating = "Rotating"
