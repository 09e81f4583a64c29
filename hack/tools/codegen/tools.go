//go:build tools

// Package codegen pins the k8s.io/code-generator whose client-gen, lister-gen, informer-gen and
// applyconfiguration-gen write pkg/generated's client code (hack/update-codegen.sh). It is the oldest
// Kubernetes minor the client modules support (k8s.io/client-go in pkg/generated/go.mod), not certapi's:
// a generator writes code for its own client-go (code-generator v0.37 writes clientsets that return
// client-go v0.37's discovery.DiscoveryInterfaces, and typed informers on cache.TypedSharedIndexInformer,
// neither of which older client-go has), and client-go keeps compiling clients generated for older
// minors. The deepcopy, conversion, defaulter and OpenAPI generators, whose output only certapi's server
// and the types use, stay at the main module's code-generator (hack/tools.go).
package codegen

import _ "k8s.io/code-generator"
