#!/usr/bin/env bash
# Runs etcd, kube-apiserver and certapi on loopback until Ctrl-C, and writes a kubeconfig to
# _output/local/kubeconfig. Builds what it needs first (make tools build), so a fresh clone works.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${ROOT}"
./hack/build-tools.sh
go build -o _output/bin/certapi ./cmd/certapi
go build -o _output/bin/local-up ./hack/local-up
export CERTAPI_BIN="${ROOT}/_output/bin/certapi"
exec _output/bin/local-up "$@"
