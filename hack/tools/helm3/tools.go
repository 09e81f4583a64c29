//go:build tools

// Package tools pins Helm 3's command line, which hack/build-tools.sh builds as helm3 beside Helm 4:
// most clusters are installed with Helm 3, so test/chart and test/release install the chart with both.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
