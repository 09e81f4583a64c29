package injector

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/signer/signertest"
)

func TestObserveConfigMap(t *testing.T) {
	bundle := signertest.Bundle(t, 1)
	meta := metav1.ObjectMeta{Name: "trust", Namespace: "team-a", UID: "u", ResourceVersion: "3"}
	cases := []struct {
		name     string
		cm       *corev1.ConfigMap
		skip     string
		path     string
		wrapKey  string
		digestOf []byte
	}{
		{name: "no data", cm: &corev1.ConfigMap{ObjectMeta: meta}, path: "/data", wrapKey: ConfigMapKey},
		{name: "other keys", cm: &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"x": "y"}}, path: "/data/ca.crt"},
		{name: "holds it", cm: &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{ConfigMapKey: string(bundle)}}, path: "/data/ca.crt", digestOf: bundle},
		{name: "immutable", cm: &corev1.ConfigMap{ObjectMeta: meta, Immutable: ptr(true)}, skip: "immutable"},
		{name: "binaryData", cm: &corev1.ConfigMap{ObjectMeta: meta, BinaryData: map[string][]byte{ConfigMapKey: bundle}}, skip: "binaryData"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs := observeConfigMap(c.cm)
			if c.skip != "" {
				if !strings.Contains(obs.Skip, c.skip) || len(obs.Slots) != 0 {
					t.Fatalf("skip %q, %d slots; want a skip naming %q", obs.Skip, len(obs.Slots), c.skip)
				}
				return
			}
			if obs.Skip != "" || len(obs.Slots) != 1 {
				t.Fatalf("skip %q, %d slots; want 1 slot", obs.Skip, len(obs.Slots))
			}
			s := obs.Slots[0]
			if s.Path != c.path || s.wrapKey != c.wrapKey || !s.text || s.Digest != digestOf(c.digestOf) {
				t.Errorf("slot = %+v", s)
			}
			if strings.Join(s.fieldPath, "|") != "f:data|f:ca.crt" {
				t.Errorf("fieldPath = %q", s.fieldPath)
			}
		})
	}
}

// TestDecideConfigMap: the bundle goes in as PEM text (not base64 as a caBundle), into a new data map
// when there is none, guarded by the resourceVersion; a ConfigMap that holds it is up to date.
func TestDecideConfigMap(t *testing.T) {
	bundle := signertest.Bundle(t, 1)
	d := digestOf(bundle)
	meta := metav1.ObjectMeta{Name: "trust", Namespace: "team-a", UID: "u", ResourceVersion: "3"}

	p := decide(observeConfigMap(&corev1.ConfigMap{ObjectMeta: meta}), bundle, d, nil)
	ops := decodePatch(t, p.patch)
	if len(ops) != 2 || ops[0].Op != "test" || ops[0].Value != "3" || ops[1].Op != "add" || ops[1].Path != "/data" {
		t.Fatalf("patch = %s", p.patch)
	}
	if m, ok := ops[1].Value.(map[string]any); !ok || m[ConfigMapKey] != string(bundle) || len(m) != 1 {
		t.Errorf("new data map = %#v", ops[1].Value)
	}

	p = decide(observeConfigMap(&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"x": "y", ConfigMapKey: "old"}}), bundle, d, nil)
	ops = decodePatch(t, p.patch)
	if len(ops) != 2 || ops[1].Path != "/data/ca.crt" || ops[1].Value != string(bundle) {
		t.Errorf("patch = %s", p.patch)
	}
	if len(p.write) != 1 || p.write[0] != "data.ca.crt" {
		t.Errorf("write = %q", p.write)
	}

	p = decide(observeConfigMap(&corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{ConfigMapKey: string(bundle)}}), bundle, d, nil)
	if !p.upToDate || p.patch != nil {
		t.Errorf("holding the bundle: %+v", p)
	}
}
