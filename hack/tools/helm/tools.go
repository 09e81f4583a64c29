//go:build tools

// Package helm pins Helm's command line, which lints, renders and installs certapi's chart
// (artifacts/charts/certapi) in test/chart and renders the kustomize manifests of artifacts/deploy from it
// (hack/update-manifests.sh). It is a module of its own, beside the kube-apiserver tools module rather than
// in it: `go get helm.sh/helm/v4@v4.3.2` in hack/tools upgrades 25 modules that kube-apiserver, kubectl and
// etcd link (google.golang.org/grpc v1.82.1 to v1.83.2, go.opentelemetry.io/otel v1.44.0 to v1.45.0,
// golang.org/x/net v0.57.0 to v0.62.0, x/crypto v0.54.0 to v0.58.0, x/sys, protobuf, genproto, ...). All
// four still build there (checked with go build), but with versions other than those k8s.io/kubernetes
// v1.37.2 is released and tested with, and every Helm bump would rebuild them.
package helm

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
