package apiserver

import (
	"fmt"
	"sync"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
)

// featureGateDefaults are certapi's defaults of k8s.io/apiserver's feature gates where they differ from
// the library's; setFeatureGateDefaults applies them where the server's flags are built (Options.Flags),
// so that --help shows them and --feature-gates can still turn each on.
//
//   - ListFromCacheSnapshot: the generic registry's watch cache keeps, with every object, a snapshot of
//     its index at each event it still remembers, to serve paginated and exact-resourceVersion lists from
//     memory. certapi serves few such lists, and after a burst the snapshots cost more than the objects:
//     with 10,000 requests created in 20 s they were about 15 MiB of live heap (and twice that resident),
//     held until new events push the burst out of the cache's history. Lists they would have served go
//     to etcd, as they did before Kubernetes 1.34. --feature-gates=ListFromCacheSnapshot=true turns them on.
//   - SizeBasedListCostEstimate keeps the size of every stored object (a map entry per key), so that
//     priority and fairness can charge a list by its bytes: 1.5 MiB of live heap with 10,000 requests.
//     certapi's lists are few and its objects small and alike, so a list is charged by its count, as
//     before Kubernetes 1.34. --feature-gates=SizeBasedListCostEstimate=true turns it on.
var featureGateDefaults = []struct {
	feature featuregate.Feature
	enabled bool
}{
	{features.ListFromCacheSnapshot, false},
	{features.SizeBasedListCostEstimate, false},
}

// setFeatureGateDefaults overrides gate's defaults with featureGateDefaults. It must run before the
// gate's flag is added to a flag set (featuregate refuses overrides after that).
func setFeatureGateDefaults(gate featuregate.MutableFeatureGate) error {
	for _, d := range featureGateDefaults {
		if err := gate.OverrideDefault(d.feature, d.enabled); err != nil {
			return fmt.Errorf("setting certapi's default of the feature gate %s: %w", d.feature, err)
		}
	}
	return nil
}

// setProcessFeatureGateDefaults applies featureGateDefaults to the process's feature gate, once: the
// first Options.Flags does it, before it adds --feature-gates.
var setProcessFeatureGateDefaults = sync.OnceValue(func() error {
	return setFeatureGateDefaults(utilfeature.DefaultMutableFeatureGate)
})
