package chart

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/certapi/certapi/test/framework"
	"github.com/certapi/certapi/test/testhelpers"
)

// TestHelm3 runs the chart with Helm 3, which most clusters are installed with, beside the Helm 4 of the
// other tests: it lints clean, renders every example exactly as Helm 4 does (so every check of the other
// tests holds for it), and installs, upgrades and uninstalls on a real kube-apiserver leaving only what
// the chart says it keeps.
func TestHelm3(t *testing.T) {
	version := runHelmBin(t, helm3Bin, "version", "--short").must(t)
	if !strings.HasPrefix(version, "v3.") {
		t.Fatalf("%s version: %q; want Helm 3", helm3Bin, version)
	}
	valueSets := [][]string{nil}
	for _, f := range exampleFiles(t) {
		valueSets = append(valueSets, []string{"-f", f})
	}

	t.Run("lint", func(t *testing.T) {
		for _, args := range valueSets {
			r := runHelmBin(t, helm3Bin, append([]string{"lint", "--strict", chartDir}, args...)...)
			if out := r.must(t); !strings.Contains(out, "1 chart(s) linted, 0 chart(s) failed") {
				t.Errorf("helm3 lint --strict %v: %s%s", args, out, r.stderr)
			}
		}
	})

	t.Run("renders as Helm 4", func(t *testing.T) {
		for _, args := range valueSets {
			// The same Kubernetes version for both: with no cluster each assumes the minor of the client-go
			// it links, and the chart renders the ClusterTrustBundle policy from 1.37 on.
			template := append([]string{"template", release, chartDir, "--namespace", "certapi", "--kube-version", "1.37.0"}, args...)
			v3, err3 := framework.DecodeManifests([]byte(runHelmBin(t, helm3Bin, template...).must(t)))
			v4, err4 := framework.DecodeManifests([]byte(runHelm(t, template...).must(t)))
			if err3 != nil || err4 != nil {
				t.Fatalf("helm3 template %v: the renderings do not decode: %v, %v", args, err3, err4)
			}
			// The same objects, in the same order (the two print empty documents and comments differently).
			if len(v3) != len(v4) {
				t.Errorf("helm3 template %v renders %d objects, Helm 4 %d", args, len(v3), len(v4))
				continue
			}
			for i := range v3 {
				if !reflect.DeepEqual(v3[i].Object, v4[i].Object) {
					a, _ := yaml.Marshal(v3[i].Object)
					b, _ := yaml.Marshal(v4[i].Object)
					t.Errorf("helm3 template %v: %s %s differs from Helm 4's at %s", args, v4[i].GetKind(), v4[i].GetName(), firstDifference(string(a), string(b)))
				}
			}
		}
	})

	t.Run("install then upgrade then uninstall", func(t *testing.T) {
		const ns = "certapi-helm3"
		encFile := testhelpers.CAKeysEncryptionConfigFile(t)
		before := certapiObjects(t)
		runHelmBin(t, helm3Bin, "install", release, chartDir, "--namespace", ns, "--create-namespace",
			"--set-file", "encryption.config="+encFile, "--set", "monitoring.serviceMonitor.enabled=true").must(t)
		manifest, err := framework.DecodeManifests([]byte(runHelmBin(t, helm3Bin, "get", "manifest", release, "--namespace", ns).must(t)))
		if err != nil || len(manifest) == 0 {
			t.Fatalf("helm3 get manifest: %d objects, %v", len(manifest), err)
		}
		// An upgrade with new values: the StatefulSet's immutable fields must not change with them.
		runHelmBin(t, helm3Bin, "upgrade", release, chartDir, "--namespace", ns, "--reuse-values",
			"--set", "commonLabels.example\\.com/team=platform").must(t)
		if got := runKubectl(t, "get", "statefulset", release, "--namespace", ns, "-o", "jsonpath={.metadata.labels.example\\.com/team}").must(t); got != "platform" {
			t.Errorf("after helm3 upgrade with commonLabels, the StatefulSet's label example.com/team is %q; want platform", got)
		}
		runHelmBin(t, helm3Bin, "uninstall", release, "--namespace", ns).must(t)
		want := map[objRef]bool{
			{schema.GroupResource{Resource: "namespaces"}, "", ns}:                       true,
			{schema.GroupResource{Resource: "secrets"}, ns, "certapi-encryption-config"}: true,
		}
		if left := leftBehind(t, before, certapiObjects(t), want); !reflect.DeepEqual(left, want) {
			t.Errorf("helm3 uninstall left %v; want exactly %v", sortedRefs(left), sortedRefs(want))
		}
	})
}

// firstDifference says where a and b first differ: the line number and both lines.
func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: %q against %q", i+1, x, y)
		}
	}
	return "nowhere"
}
