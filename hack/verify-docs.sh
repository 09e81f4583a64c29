#!/usr/bin/env bash
# Fails when the generated reference pages, docs/api-reference.md and docs/flags.md, or the values table of
# the Helm chart's README, differ from what hack/docgen writes from the API types, certapi's flag sets and
# the chart's values.yaml now. `make docs` regenerates them.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${ROOT}"
go run ./hack/docgen -root "${ROOT}" -check
echo "docs/api-reference.md, docs/flags.md and the values table of artifacts/charts/certapi/README.md are current"
