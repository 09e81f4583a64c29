#!/usr/bin/env bash
# Builds the real parts certapi's tests run against: kube-apiserver and kubectl (k8s.io/kubernetes v1.37.x),
# etcd (go.etcd.io/etcd/server/v3) and podcertnode (kubelet's own podcertificate manager, standing in for a
# node's kubelet), all from the Go module proxy through the hack/tools module, and
# Prometheus's promtool and server (github.com/prometheus/prometheus) through their own module
# hack/tools/prometheus, and helm (helm.sh/helm/v4) through its own module hack/tools/helm, into
# _output/bin. Each group is skipped when its binaries were built from the same sources and Go; each has
# its own stamp, so that a change to one never rebuilds another.
#
# Usage: hack/build-tools.sh [GROUP...]   GROUP: kube (etcd, kube-apiserver, kubectl, podcertnode),
# prometheus, helm; all three when none is named. hack/update-manifests.sh builds only helm.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
BIN="${ROOT}/_output/bin"
TOOLS="${ROOT}/hack/tools"
mkdir -p "${BIN}"
GOVERSION="$(go env GOVERSION)"
GROUPS_WANTED=("$@")
if [[ ${#GROUPS_WANTED[@]} -eq 0 ]]; then
  GROUPS_WANTED=(kube prometheus helm)
fi
for g in "${GROUPS_WANTED[@]}"; do
  case "${g}" in
    kube | prometheus | helm) ;;
    *) echo "build-tools.sh: unknown group ${g}; want kube, prometheus or helm" >&2; exit 2 ;;
  esac
done
wanted() { [[ " ${GROUPS_WANTED[*]} " == *" $1 "* ]]; }

# kube-apiserver, kubectl, etcd and podcertnode.
if wanted kube; then
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
fi

# promtool and prometheus, which check the alerting rules and the dashboard in artifacts/monitoring
# (test/monitoring). Their own module keeps Prometheus's dependencies from moving the versions
# kube-apiserver is built with.
if wanted prometheus; then
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
fi

# helm, which lints, renders and installs the chart artifacts/charts/certapi (test/chart) and renders
# artifacts/deploy from it (hack/update-manifests.sh, make verify). Its own module, like Prometheus's:
# Helm 4 needs newer grpc, OpenTelemetry and golang.org/x modules than k8s.io/kubernetes v1.37.2 is built
# with. The version is stamped in as Helm's own Makefile does (`helm version`, .Capabilities.HelmVersion).
if wanted helm; then
HSTAMP="${BIN}/.helm-stamp"
hwant="$(cd "${TOOLS}/helm" && cat go.mod go.sum tools.go | sha256sum | cut -d' ' -f1) ${GOVERSION}"
if [[ -f "${HSTAMP}" && "$(cat "${HSTAMP}")" == "${hwant}" && -x "${BIN}/helm" ]]; then
  echo "helm is current in ${BIN}"
else
  (
    cd "${TOOLS}/helm"
    start=${SECONDS}
    echo "building helm into ${BIN} (a cold build takes about 6 minutes of CPU)"
    version="$(go list -m -f '{{.Version}}' helm.sh/helm/v4)"
    go build -ldflags "-X helm.sh/helm/v4/internal/version.version=${version}" -o "${BIN}/helm" helm.sh/helm/v4/cmd/helm
    echo "${hwant}" > "${HSTAMP}"
    echo "helm built in $((SECONDS - start))s"
  )
fi
fi
