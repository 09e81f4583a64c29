//go:build tools

// Package helm pins Helm's command line, which lints, renders and installs certapi's chart
// (artifacts/charts/certapi) in test/chart and renders the kustomize manifests of artifacts/deploy from it
// (hack/update-manifests.sh). It is a module of its own, beside the kube-apiserver tools module rather than
// in it: Helm 4.3 requires newer grpc, OpenTelemetry, golang.org/x/net, x/crypto and some twenty other
// modules than k8s.io/kubernetes v1.37.2 is built with, so adding it there would move the versions
// kube-apiserver, kubectl and etcd are built with (and rebuild them all whenever Helm changes).
package helm

import (
	_ "helm.sh/helm/v4/cmd/helm"
)
