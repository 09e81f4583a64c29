#!/usr/bin/env bash
# Fails when the manifests hack/update-manifests.sh renders from the chart artifacts/charts/certapi
# (artifacts/deploy and artifacts/monitoring's ServiceMonitor, PrometheusRule and Prometheus RBAC) differ
# from the ones in the tree: renders them into a copy and compares.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT
mkdir -p "${TMP}/artifacts"
cp -a "${ROOT}/artifacts/deploy" "${ROOT}/artifacts/monitoring" "${TMP}/artifacts/"
"${ROOT}/hack/update-manifests.sh" "${TMP}"
if ! diff -ruN "${ROOT}/artifacts/deploy" "${TMP}/artifacts/deploy" || ! diff -ruN "${ROOT}/artifacts/monitoring" "${TMP}/artifacts/monitoring"; then
  echo "artifacts/deploy or artifacts/monitoring differ from what the chart renders: edit artifacts/charts/certapi, then run hack/update-manifests.sh" >&2
  exit 1
fi
echo "artifacts/deploy and artifacts/monitoring are current with artifacts/charts/certapi"
