#!/usr/bin/env bash
# Builds the real parts certapi's tests run against: kube-apiserver and kubectl (k8s.io/kubernetes v1.37.x),
# etcd (go.etcd.io/etcd/server/v3), and podcertnode (kubelet's own podcertificate manager, standing in for
# a node's kubelet), all from the Go module proxy through the hack/tools module, into _output/bin. Skips
# the build when the binaries were built from the same hack/tools sources and Go.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="${ROOT}/_output/bin"
STAMP="${BIN}/.tools-stamp"
TOOLS="${ROOT}/hack/tools"
mkdir -p "${BIN}"

want="$(cd "${TOOLS}" && cat go.mod go.sum tools.go etcd/main.go podcertnode/main.go | sha256sum | cut -d' ' -f1) $(go env GOVERSION)"
if [[ -f "${STAMP}" && "$(cat "${STAMP}")" == "${want}" && -x "${BIN}/kube-apiserver" && -x "${BIN}/etcd" && -x "${BIN}/kubectl" && -x "${BIN}/podcertnode" ]]; then
  echo "tools are current in ${BIN}"
  exit 0
fi

cd "${TOOLS}"
start=${SECONDS}
echo "building etcd, kube-apiserver, kubectl and podcertnode into ${BIN} (a cold build takes about 10 minutes on 2 cores)"
go build -o "${BIN}/etcd" ./etcd
go build -o "${BIN}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -o "${BIN}/kubectl" k8s.io/kubernetes/cmd/kubectl
go build -o "${BIN}/podcertnode" ./podcertnode
echo "${want}" > "${STAMP}"
echo "tools built in $((SECONDS - start))s"
