#!/usr/bin/env bash
# Regenerates everything under pkg/generated/ and the zz_generated files in pkg/apis/ with
# k8s.io/code-generator's kube_codegen.sh, at the version go.mod pins. Never edit their output by hand.
set -o errexit -o nounset -o pipefail

SCRIPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${SCRIPT_ROOT}"
CODEGEN_PKG="${CODEGEN_PKG:-$(go list -m -f '{{.Dir}}' k8s.io/code-generator)}"
THIS_PKG="github.com/certapi/certapi"
BOILERPLATE="${SCRIPT_ROOT}/hack/boilerplate.go.txt"

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

kube::codegen::gen_client \
    --with-watch \
    --with-applyconfig \
    --applyconfig-openapi-schema <(go run ./hack/models-schema) \
    --output-dir "${SCRIPT_ROOT}/pkg/generated" \
    --output-pkg "${THIS_PKG}/pkg/generated" \
    --boilerplate "${BOILERPLATE}" \
    "${SCRIPT_ROOT}/pkg/apis"
