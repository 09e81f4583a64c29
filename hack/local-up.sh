#!/usr/bin/env bash
# certapi's local demo (make local-up): etcd, kube-apiserver and certapi on loopback, a ServingCertRequest
# made with the kubectl plugin, and the example webhook of artifacts/examples/webhook serving with a
# certificate from certapi while kube-apiserver calls it; a short walkthrough, then it runs until Ctrl-C.
# State, kubeconfig and logs go to _output/local (--dir=DIR for another directory, emptied at start).
# --node (make local-up NODE=1) runs certapi as a pod on a real node, from
# artifacts/deploy/overlays/single-replica; --node --ha (NODE=1 HA=1) installs artifacts/deploy/base there,
# the HA default: three replicas whose embedded etcd members form one cluster on the one node; with
# --workers=N (NODE=3 HA=1) on N worker nodes, one replica on each.
#
# Builds what it needs first, into _output/bin: the tools it runs (hack/build-tools.sh kube, and node with
# --node; skipped when current), certapi
# (unless $CERTAPI_BIN names a prebuilt one), the kubectl plugins, the example webhook and local-up itself.
# $LOCAL_UP_BIN_DIR puts those last four (and certapi) in another directory instead, with a link to
# _output/bin's kubectl: test/node/localup uses it to leave _output/bin as it is.
set -o errexit -o nounset -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${ROOT}"
# Only the tools it runs: etcd, kube-apiserver and kubectl (the kube group); the node's with --node.
# Prometheus, helm and CoreDNS are for the tests (CoreDNS's image comes from make images, with NODE=1).
groups=(kube)
for a in "$@"; do
  if [[ "${a}" == --node || "${a}" == --node=true ]]; then
    groups+=(node)
  fi
done
./hack/build-tools.sh "${groups[@]}"
BIN="${LOCAL_UP_BIN_DIR:-${ROOT}/_output/bin}"
if [[ "${BIN}" != "${ROOT}/_output/bin" ]]; then
  mkdir -p "${BIN}"
  ln -sf "${ROOT}/_output/bin/kubectl" "${BIN}/kubectl"
fi
if [[ -z "${CERTAPI_BIN:-}" ]]; then
  echo "building certapi, kubectl-create-servingcertrequest, kubectl-certapi, example-webhook and local-up into ${BIN}"
  go build -o "${BIN}/certapi" ./cmd/certapi
  export CERTAPI_BIN="${BIN}/certapi"
else
  echo "building kubectl-create-servingcertrequest, kubectl-certapi, example-webhook and local-up into ${BIN} (certapi: ${CERTAPI_BIN})"
fi
go build -o "${BIN}/kubectl-create-servingcertrequest" ./cmd/kubectl-create-servingcertrequest
go build -o "${BIN}/kubectl-certapi" ./cmd/kubectl-certapi
go build -o "${BIN}/example-webhook" ./artifacts/examples/webhook
go build -o "${BIN}/local-up" ./hack/local-up
exec "${BIN}/local-up" --bin-dir="${BIN}" "$@"
