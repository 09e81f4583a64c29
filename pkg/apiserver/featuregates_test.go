package apiserver

import (
	"testing"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

// TestSetFeatureGateDefaults: certapi's defaults are set on a gate whose defaults are the library's (on,
// since Kubernetes 1.34), and refused, with an error, once the gate's flag exists.
func TestSetFeatureGateDefaults(t *testing.T) {
	gate := utilfeature.DefaultMutableFeatureGate.DeepCopyAndReset()
	for _, d := range featureGateDefaults {
		if err := gate.OverrideDefault(d.feature, !d.enabled); err != nil {
			t.Fatal(err)
		}
	}
	if err := setFeatureGateDefaults(gate); err != nil {
		t.Fatal(err)
	}
	for _, d := range featureGateDefaults {
		if got := gate.Enabled(d.feature); got != d.enabled {
			t.Errorf("%s: enabled %v; want certapi's default %v", d.feature, got, d.enabled)
		}
	}
	if len(featureGateDefaults) < 2 {
		t.Errorf("certapi's feature gate defaults: %v; want ListFromCacheSnapshot and SizeBasedListCostEstimate", featureGateDefaults)
	}
}
