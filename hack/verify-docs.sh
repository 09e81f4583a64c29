#!/usr/bin/env bash
# Fails when the generated reference pages, docs/api-reference.md and docs/flags.md, the values table of
# the Helm chart's README, or the supported-versions table of docs/install.md differ from what hack/docgen
# writes from the API types, certapi's flag sets, the chart's values.yaml and the results of `make
# test-matrix` (docs/matrix) now. `make docs` regenerates them.
set -o errexit -o nounset -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
cd "${ROOT}"
go run ./hack/docgen -root "${ROOT}" -check
echo "docs/api-reference.md, docs/flags.md, the values table of artifacts/charts/certapi/README.md and the supported-versions table of docs/install.md are current"
