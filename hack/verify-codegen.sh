#!/usr/bin/env bash
# Fails when the generated code in the tree differs from what hack/update-codegen.sh makes now.
# It generates into a scratch copy of the repository, so the working tree is never changed.
set -o errexit -o nounset -o pipefail

SCRIPT_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
SCRATCH="$(mktemp -d -t certapi-verify-codegen.XXXXXX)"
trap 'rm -rf "${SCRATCH}"' EXIT

# Copy only what generation reads and writes; the module cache is shared.
mkdir -p "${SCRATCH}/repo"
(cd "${SCRIPT_ROOT}" && tar --exclude=./_output --exclude=./.git -cf - .) | tar -C "${SCRATCH}/repo" -xf -
# update-codegen.sh downloads k8s.io/code-generator when the module cache lacks it (a fresh machine, CI).
# The generators it installs are kept in this checkout's _output, not the scratch copy's.
if ! (cd "${SCRATCH}/repo" && CERTAPI_OUTPUT="${SCRIPT_ROOT}/_output" ./hack/update-codegen.sh >/dev/null); then
  echo "hack/verify-codegen.sh: hack/update-codegen.sh failed (see above); the generated code was not checked." >&2
  exit 1
fi

stale=0
for dir in pkg/apis pkg/generated; do
  diff -Naupr "${SCRIPT_ROOT}/${dir}" "${SCRATCH}/repo/${dir}" || stale=1
done
if [[ "${stale}" != 0 ]]; then
  echo "Generated code is stale: run hack/update-codegen.sh and commit the result." >&2
  exit 1
fi
echo "Generated code is up to date."
