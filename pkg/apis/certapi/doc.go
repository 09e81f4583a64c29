// +k8s:deepcopy-gen=package
// +groupName=certapi.dev

// Package certapi holds the internal types of the certapi.dev API group: what the server validates
// and stores. Clients use the versioned types in v1alpha1.
package certapi
