#!/usr/bin/env bash
# Regenerates everything under pkg/generated/ and the zz_generated files in pkg/apis/ with
# k8s.io/code-generator's kube_codegen.sh: the client code at the version hack/tools/codegen pins, the rest
# at the version go.mod pins. Never edit their output by hand.
set -o errexit -o nounset -o pipefail

SCRIPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${SCRIPT_ROOT}"
THIS_PKG="github.com/certapi/certapi"
BOILERPLATE="${SCRIPT_ROOT}/hack/boilerplate.go.txt"

# Two k8s.io/code-generator versions, each run from its module cache directory. The deepcopy, conversion,
# defaulter and OpenAPI generators run at the version go.mod pins (hack/tools.go keeps it there), unless
# $CODEGEN_PKG names a checkout. The client generators (clientset, listers, informers, apply
# configurations) run at the version hack/tools/codegen pins, the oldest Kubernetes minor the client modules
# support, so that pkg/generated compiles against that client-go and every newer one (hack/tools/codegen's
# tools.go says why), unless $CLIENT_CODEGEN_PKG names a checkout.
TMP="$(mktemp -d -t certapi-codegen.XXXXXX)"
trap 'rm -rf "${TMP}"' EXIT

# codegen_setup MODULE_DIR FROM_CALLER: sets CODEGEN_ROOT to the code-generator of MODULE_DIR (or to
# FROM_CALLER, a checkout, when not empty) and exports GOBIN for its generators. `go list -m` prints the
# directory only once the module is in the module cache, and on a fresh machine (or CI) it is not: download
# it first, which does nothing when it is there already.
#
# kube_codegen.sh `go install`s the generators into $GOBIN (else the first $GOPATH/bin) and runs them from
# there by full path, so PATH does not matter. They go into a directory of the project's, one per
# code-generator version and Go version: not into the user's bin directory, and never replaced by a run
# from a checkout that pins another version. A later run finds them current, and go install skips them.
# (hack/verify-codegen.sh runs this in a scratch copy and passes its own _output in CERTAPI_OUTPUT.)
# Generators from a checkout go into this run's temporary directory.
codegen_setup() {
  local moddir="$1" from_caller="$2" version
  if [[ -n "${from_caller}" ]]; then
    CODEGEN_ROOT="${from_caller}"
    export GOBIN="${TMP}/bin-$(basename "${moddir}")"
  else
    if ! (cd "${moddir}" && go mod download k8s.io/code-generator); then
      echo "hack/update-codegen.sh: cannot download the k8s.io/code-generator of ${moddir} into the module" \
        "cache ($(go env GOMODCACHE)); see the error above" >&2
      exit 1
    fi
    read -r CODEGEN_ROOT version < <(cd "${moddir}" && go list -m -f '{{.Dir}} {{.Version}}' k8s.io/code-generator)
    export GOBIN="${CERTAPI_OUTPUT:-${SCRIPT_ROOT}/_output}/codegen/${version}-$(go env GOVERSION)/bin"
  fi
  if [[ ! -f "${CODEGEN_ROOT}/kube_codegen.sh" ]]; then
    if [[ -n "${from_caller}" ]]; then
      echo "hack/update-codegen.sh: ${from_caller} has no kube_codegen.sh" >&2
    else
      echo "hack/update-codegen.sh: no kube_codegen.sh in \"${CODEGEN_ROOT}\", the directory go list gives for" \
        "the k8s.io/code-generator of ${moddir} after downloading it" >&2
    fi
    exit 1
  fi
  mkdir -p "${GOBIN}"
}

codegen_setup "${SCRIPT_ROOT}" "${CODEGEN_PKG:-}"
# shellcheck source=/dev/null
source "${CODEGEN_ROOT}/kube_codegen.sh"

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

# The client code, at the client modules' oldest minor: kube_codegen.sh of that version defines the same
# functions, so sourcing it replaces the ones above.
codegen_setup "${SCRIPT_ROOT}/hack/tools/codegen" "${CLIENT_CODEGEN_PKG:-}"
# shellcheck source=/dev/null
source "${CODEGEN_ROOT}/kube_codegen.sh"

# From pkg/generated's module, which requires pkg/apis: client-gen loads the types by their directory, and
# from the main module a directory of the nested pkg/apis is "not in the main module". The generators then
# also read k8s.io/apimachinery at the version the client code is for.
(
  cd "${SCRIPT_ROOT}/pkg/generated"
  kube::codegen::gen_client \
      --with-watch \
      --with-applyconfig \
      --applyconfig-openapi-schema "${TMP}/models-schema.json" \
      --output-dir "${SCRIPT_ROOT}/pkg/generated" \
      --output-pkg "${THIS_PKG}/pkg/generated" \
      --boilerplate "${BOILERPLATE}" \
      "${SCRIPT_ROOT}/pkg/apis"
)
