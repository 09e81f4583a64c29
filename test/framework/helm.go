package framework

// EnvHelmBin names a helm binary to use instead of <repo>/_output/bin/helm.
const EnvHelmBin = "HELM_BIN"

// EnvHelm3Bin names a Helm 3 binary to use instead of <repo>/_output/bin/helm3.
const EnvHelm3Bin = "HELM3_BIN"

// HelmBinary returns helm: $HELM_BIN if set, otherwise <repo>/_output/bin/helm, built by `make tools`
// (hack/tools/helm).
func HelmBinary() (string, error) {
	return toolBinary("helm", EnvHelmBin)
}

// Helm3Binary returns Helm 3: $HELM3_BIN if set, otherwise <repo>/_output/bin/helm3, built by `make tools`
// (hack/tools/helm3). Most clusters are installed with Helm 3, so the chart's tests run it beside Helm 4.
func Helm3Binary() (string, error) {
	return toolBinary("helm3", EnvHelm3Bin)
}
