// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/certapi/certapi/pkg/apis/certapi
// +k8s:defaulter-gen=TypeMeta
// +groupName=certapi.dev
// +k8s:openapi-model-package=com.github.certapi.certapi.pkg.apis.certapi.v1alpha1

// Package v1alpha1 is the v1alpha1 version of the certapi.dev API: what clients send and receive.
package v1alpha1
