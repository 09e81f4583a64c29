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
(cd "${SCRATCH}/repo" && ./hack/update-codegen.sh >/dev/null)

stale=0
for dir in pkg/apis pkg/generated; do
  diff -Naupr "${SCRIPT_ROOT}/${dir}" "${SCRATCH}/repo/${dir}" || stale=1
done
if [[ "${stale}" != 0 ]]; then
  echo "Generated code is stale: run hack/update-codegen.sh and commit the result." >&2
  exit 1
fi
echo "Generated code is up to date."
