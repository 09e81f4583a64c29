#!/usr/bin/env bash
# Fails when the generated reference pages, docs/api-reference.md and docs/flags.md, differ from what
# hack/docgen writes from the API types and certapi's flag sets now. `make docs` regenerates them.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${ROOT}"
go run ./hack/docgen -root "${ROOT}" -check
echo "docs/api-reference.md and docs/flags.md are current"
