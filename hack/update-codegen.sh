#!/usr/bin/env bash
# Regenerates everything under pkg/generated/ and the zz_generated files in pkg/apis/ with
# k8s.io/code-generator's kube_codegen.sh, at the version go.mod pins. Never edit their output by hand.
set -o errexit -o nounset -o pipefail

SCRIPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${SCRIPT_ROOT}"
THIS_PKG="github.com/certapi/certapi"
BOILERPLATE="${SCRIPT_ROOT}/hack/boilerplate.go.txt"

# k8s.io/code-generator at the version go.mod pins (hack/tools.go keeps it there), unless $CODEGEN_PKG
# names a checkout. `go list -m` prints its directory only once the module is in the module cache, and on
# a fresh machine (or CI) it is not: download it first, which does nothing when it is there already.
CODEGEN_PKG_FROM_CALLER="${CODEGEN_PKG:-}"
if [[ -z "${CODEGEN_PKG_FROM_CALLER}" ]]; then
  if ! go mod download k8s.io/code-generator; then
    echo "hack/update-codegen.sh: cannot download k8s.io/code-generator into the module cache" \
      "($(go env GOMODCACHE)); see the error above" >&2
    exit 1
  fi
  CODEGEN_PKG="$(go list -m -f '{{.Dir}}' k8s.io/code-generator)"
fi
if [[ ! -f "${CODEGEN_PKG}/kube_codegen.sh" ]]; then
  if [[ -n "${CODEGEN_PKG_FROM_CALLER}" ]]; then
    echo "hack/update-codegen.sh: CODEGEN_PKG=${CODEGEN_PKG} has no kube_codegen.sh" >&2
  else
    echo "hack/update-codegen.sh: no kube_codegen.sh in \"${CODEGEN_PKG}\", the directory go list gives for" \
      "k8s.io/code-generator after downloading it" >&2
  fi
  exit 1
fi

TMP="$(mktemp -d -t certapi-codegen.XXXXXX)"
trap 'rm -rf "${TMP}"' EXIT
# kube_codegen.sh `go install`s the generators into $GOBIN (else the first $GOPATH/bin) and runs them from
# there by full path, so PATH does not matter. They go into a directory of the project's, one per
# code-generator version and Go version: not into the user's bin directory, and never replaced by a run
# from a checkout that pins another version. A later run finds them current, and go install skips them.
# (hack/verify-codegen.sh runs this in a scratch copy and passes its own _output in CERTAPI_OUTPUT.)
# Generators from a CODEGEN_PKG checkout go into this run's temporary directory.
if [[ -n "${CODEGEN_PKG_FROM_CALLER}" ]]; then
  export GOBIN="${TMP}/bin"
else
  export GOBIN="${CERTAPI_OUTPUT:-${SCRIPT_ROOT}/_output}/codegen/$(go list -m -f '{{.Version}}' k8s.io/code-generator)-$(go env GOVERSION)/bin"
fi
mkdir -p "${GOBIN}"

# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

kube::codegen::gen_helpers \
    --boilerplate "${BOILERPLATE}" \
    "${SCRIPT_ROOT}/pkg/apis"

kube::codegen::gen_openapi \
    --output-dir "${SCRIPT_ROOT}/pkg/generated/openapi" \
    --output-pkg "${THIS_PKG}/pkg/generated/openapi" \
    --report-filename "${SCRIPT_ROOT}/hack/api-rules/violation_exceptions.list" \
    ${UPDATE_API_KNOWN_VIOLATIONS:+--update-report} \
    --output-model-name-file "zz_generated.model_name.go" \
    --boilerplate "${BOILERPLATE}" \
    "${SCRIPT_ROOT}/pkg/apis"

# The schema applyconfiguration-gen reads. hack/models-schema builds it from pkg/generated/openapi, so it
# runs after gen_openapi: before, a change to the API types needed two runs of this script. It goes into
# a file, not a process substitution, whose exit status would be lost (the generator would go on with an
# empty schema).
go run ./hack/models-schema > "${TMP}/models-schema.json"

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-openapi-schema "${TMP}/models-schema.json" \
    --output-dir "${SCRIPT_ROOT}/pkg/generated" \
    --output-pkg "${THIS_PKG}/pkg/generated" \
    --boilerplate "${BOILERPLATE}" \
    "${SCRIPT_ROOT}/pkg/apis"
