package injector

import (
	corev1 "k8s.io/api/core/v1"
)

// KindConfigMap: data["ca.crt"], as PEM text, for clients that cannot mount a ClusterTrustBundle.
// ConfigMaps are the one namespaced kind: their keys are "<namespace>/<name>".
const KindConfigMap Kind = "ConfigMap"

// ConfigMapKey is the key of a ConfigMap's data the bundle is written to.
const ConfigMapKey = "ca.crt"

var configMaps = &kindSpec{
	kind:       KindConfigMap,
	gvr:        corev1.SchemeGroupVersion.WithResource("configmaps"),
	namespaced: true,
	newAccessor: func(c clientsets) accessor {
		return newNamespacedAccessor(c.kube.CoreV1().ConfigMaps, observeConfigMap)
	},
}

// observeConfigMap: data["ca.crt"], written as text. It is skipped when the ConfigMap is immutable
// (no write could ever succeed) or holds ca.crt in binaryData (a key cannot be in both).
func observeConfigMap(o *corev1.ConfigMap) *observation {
	obs, owners := newObservation(&o.ObjectMeta)
	switch {
	case o.Immutable != nil && *o.Immutable:
		obs.Skip = "it is immutable; make a new ConfigMap without immutable: true to have " + ConfigMapKey + " injected"
	case o.BinaryData[ConfigMapKey] != nil:
		obs.Skip = "binaryData holds " + ConfigMapKey + "; remove it to have the bundle injected into data"
	default:
		s := slot{
			Path:      "/data/" + ConfigMapKey,
			fieldPath: []string{"f:data", "f:" + ConfigMapKey},
			text:      true,
		}
		if o.Data == nil {
			// No data map yet: the patch adds the map with the one key.
			s.Path, s.wrapKey = "/data", ConfigMapKey
		}
		obs.addSlot(s, []byte(o.Data[ConfigMapKey]))
	}
	setOwners(obs, owners)
	return obs
}
