package framework

// EnvHelmBin names a helm binary to use instead of <repo>/_output/bin/helm.
const EnvHelmBin = "HELM_BIN"

// HelmBinary returns helm: $HELM_BIN if set, otherwise <repo>/_output/bin/helm, built by `make tools`
// (hack/tools/helm).
func HelmBinary() (string, error) {
	return toolBinary("helm", EnvHelmBin)
}
