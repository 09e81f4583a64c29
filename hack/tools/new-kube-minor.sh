#!/usr/bin/env bash
# Writes the tools module of one more Kubernetes minor for `make test-matrix`: hack/tools/kube-<minor>/, a
# module that builds kube-apiserver and kubectl of k8s.io/kubernetes VERSION from the Go module proxy, as
# hack/tools does for the current minor (a replace of every staging module k8s.io/kubernetes VERSION
# replaces with its ./staging directory, to the matching v0.<minor>.<patch>), then `go mod tidy`s it.
# Run it again with a newer patch to move the minor on. `hack/build-tools.sh kube-<minor>` builds it into
# _output/kube/v<minor>/bin.
#
# Usage: hack/tools/new-kube-minor.sh VERSION   e.g. v1.33.7
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
VERSION="${1:-}"
if [[ ! "${VERSION}" =~ ^v1\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "usage: $0 VERSION (a release of k8s.io/kubernetes, e.g. v1.33.7)" >&2
  exit 2
fi
MINOR="1.${BASH_REMATCH[1]}"
STAGING_VERSION="v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
DIR="${ROOT}/hack/tools/kube-${MINOR}"

# The staging modules: k8s.io/kubernetes' own go.mod replaces each with its ./staging/src directory.
GOMOD="$(go mod download -json "k8s.io/kubernetes@${VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",*$/\1/p')"
if [[ ! -f "${GOMOD}" ]]; then
  echo "$0: no go.mod of k8s.io/kubernetes@${VERSION} in the module cache" >&2
  exit 1
fi
mapfile -t STAGING < <(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\)[[:space:]]*=>[[:space:]]*\./staging/.*#\1#p' "${GOMOD}" | sort -u)
if (( ${#STAGING[@]} == 0 )); then
  echo "$0: k8s.io/kubernetes@${VERSION}'s go.mod replaces no staging module" >&2
  exit 1
fi

mkdir -p "${DIR}"
{
  echo "// Module kube-${MINOR} builds kube-apiserver and kubectl ${VERSION} for \`make test-matrix\`: certapi's core"
  echo "// end-to-end cases run against each supported Kubernetes minor. Written by hack/tools/new-kube-minor.sh ${VERSION};"
  echo "// hack/build-tools.sh kube-${MINOR} builds it into _output/kube/v${MINOR}/bin."
  echo "module github.com/certapi/certapi/hack/tools/kube-${MINOR}"
  echo
  echo "go $(sed -n 's/^go //p' "${ROOT}/hack/tools/go.mod")"
  echo
  echo "require k8s.io/kubernetes ${VERSION}"
  echo
  echo "replace ("
  for m in "${STAGING[@]}"; do
    printf '\t%s => %s %s\n' "${m}" "${m}" "${STAGING_VERSION}"
  done
  echo ")"
} > "${DIR}/go.mod"
cat > "${DIR}/tools.go" <<'EOF'
//go:build tools

// Package tools pins the commands this module builds, so that `go mod tidy` keeps their dependencies.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
rm -f "${DIR}/go.sum"
(cd "${DIR}" && go mod tidy)
echo "wrote ${DIR#"${ROOT}"/} for k8s.io/kubernetes ${VERSION} (${#STAGING[@]} staging modules at ${STAGING_VERSION})"
