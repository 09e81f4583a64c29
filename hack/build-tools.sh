#!/usr/bin/env bash
# Builds the real parts certapi's tests run against: kube-apiserver and kubectl (k8s.io/kubernetes v1.37.x),
# etcd (go.etcd.io/etcd/server/v3) and podcertnode (kubelet's own podcertificate manager, standing in for a
# node's kubelet), all from the Go module proxy through the hack/tools module, and
# Prometheus's promtool and server (github.com/prometheus/prometheus) through their own module
# hack/tools/prometheus, and CoreDNS (github.com/coredns/coredns, only the plugins a cluster DNS needs)
# through its own module hack/tools/coredns, into _output/bin. Each group is skipped when its binaries
# were built from the same sources and Go; each has its own stamp, so that a change to one never
# rebuilds the other.
#
# `hack/build-tools.sh coredns` builds only CoreDNS (make images needs nothing else).
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="${ROOT}/_output/bin"
TOOLS="${ROOT}/hack/tools"
mkdir -p "${BIN}"
GOVERSION="$(go env GOVERSION)"

# CoreDNS, the test node's cluster DNS, for the certapi.dev/coredns image (make images). Static
# (CGO_ENABLED=0): it runs in an empty base image.
CSTAMP="${BIN}/.coredns-stamp"
cwant="$(cd "${TOOLS}/coredns" && cat go.mod go.sum main.go | sha256sum | cut -d' ' -f1) ${GOVERSION}"
if [[ -f "${CSTAMP}" && "$(cat "${CSTAMP}")" == "${cwant}" && -x "${BIN}/coredns" ]]; then
  echo "coredns is current in ${BIN}"
else
  (
    cd "${TOOLS}/coredns"
    start=${SECONDS}
    echo "building coredns into ${BIN} (a cold build takes about 4 minutes of CPU)"
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "${BIN}/coredns" .
    echo "${cwant}" > "${CSTAMP}"
    echo "coredns built in $((SECONDS - start))s"
  )
fi
if [[ "${1:-}" == coredns ]]; then
  exit 0
fi

# kube-apiserver, kubectl, etcd and podcertnode.
STAMP="${BIN}/.tools-stamp"
want="$(cd "${TOOLS}" && cat go.mod go.sum tools.go etcd/main.go podcertnode/main.go | sha256sum | cut -d' ' -f1) ${GOVERSION}"
if [[ -f "${STAMP}" && "$(cat "${STAMP}")" == "${want}" && -x "${BIN}/kube-apiserver" && -x "${BIN}/etcd" && -x "${BIN}/kubectl" && -x "${BIN}/podcertnode" ]]; then
  echo "tools are current in ${BIN}"
else
  (
    cd "${TOOLS}"
    start=${SECONDS}
    echo "building etcd, kube-apiserver, kubectl and podcertnode into ${BIN} (a cold build takes about 10 minutes on 2 cores)"
    go build -o "${BIN}/etcd" ./etcd
    go build -o "${BIN}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
    go build -o "${BIN}/kubectl" k8s.io/kubernetes/cmd/kubectl
    go build -o "${BIN}/podcertnode" ./podcertnode
    echo "${want}" > "${STAMP}"
    echo "tools built in $((SECONDS - start))s"
  )
fi

# promtool and prometheus, which check the alerting rules and the dashboard in artifacts/monitoring
# (test/monitoring). Their own module keeps Prometheus's dependencies from moving the versions
# kube-apiserver is built with.
PSTAMP="${BIN}/.prometheus-stamp"
pwant="$(cd "${TOOLS}/prometheus" && cat go.mod go.sum tools.go | sha256sum | cut -d' ' -f1) ${GOVERSION}"
if [[ -f "${PSTAMP}" && "$(cat "${PSTAMP}")" == "${pwant}" && -x "${BIN}/promtool" && -x "${BIN}/prometheus" ]]; then
  echo "promtool and prometheus are current in ${BIN}"
else
  (
    cd "${TOOLS}/prometheus"
    start=${SECONDS}
    echo "building promtool and prometheus into ${BIN} (a cold build takes about 10 minutes of CPU)"
    go build -o "${BIN}/promtool" github.com/prometheus/prometheus/cmd/promtool
    go build -o "${BIN}/prometheus" github.com/prometheus/prometheus/cmd/prometheus
    echo "${pwant}" > "${PSTAMP}"
    echo "promtool and prometheus built in $((SECONDS - start))s"
  )
fi
