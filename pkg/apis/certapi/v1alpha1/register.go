package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of certapi.
const GroupName = "certapi.dev"

// Version is the API version of the types in this package.
const Version = "v1alpha1"

// APIVersion is this group and version as an object's apiVersion and discovery name them.
const APIVersion = GroupName + "/" + Version

// APIServiceName is the APIService that registers this group and version with kube-apiserver's
// aggregator. certapi injects its CA bundle into it, as into every object that opts in.
const APIServiceName = Version + "." + GroupName

// SchemeGroupVersion is the group and version of the types in this package.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: Version}

var (
	// SchemeBuilder collects the functions that add this package's types, defaults and conversions to a scheme.
	SchemeBuilder      runtime.SchemeBuilder
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme adds this package's types, defaults and conversions to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	// Generated conversions and defaulters register themselves in their own files.
	localSchemeBuilder.Register(addKnownTypes, addDefaultingFuncs)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&ServingCertRequest{},
		&ServingCertRequestList{},
		&ServingCert{},
		&CertificateAuthority{},
		&CertificateAuthorityList{},
		&CertificateAuthorityImport{},
	)
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}

// Resource qualifies a resource name with this group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}
