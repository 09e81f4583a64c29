package kubectlcertapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestSaveCommand(t *testing.T) {
	pod := func(containers ...corev1.Container) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "certapi-system", Name: "certapi-0"}, Spec: corev1.PodSpec{Containers: containers}}
	}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		want    []string
		wantErr string
	}{
		{"the chart's pod: its data dir and encryption configuration",
			pod(corev1.Container{Name: "sidecar"}, corev1.Container{Name: "certapi", Args: []string{"--secure-port=8443", "--data-dir=/var/lib/certapi/data",
				"--encryption-provider-config=/etc/certapi/encryption/config.yaml", "--leader-identity=$(POD_NAME)"}}),
			[]string{"certapi", "snapshot", "save", "-", "--data-dir=/var/lib/certapi/data", "--encryption-provider-config=/etc/certapi/encryption/config.yaml"}, ""},
		{"no flags: certapi's defaults",
			pod(corev1.Container{Name: "certapi"}),
			[]string{"certapi", "snapshot", "save", "-"}, ""},
		{"an external etcd is refused, saying where to save from",
			pod(corev1.Container{Name: "certapi", Args: []string{"--etcd-servers=https://etcd:2379"}}), nil, "certapi snapshot save FILE --etcd-servers"},
		{"not certapi's pod", pod(corev1.Container{Name: "nginx"}), nil, "no container named certapi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			container, got, err := saveCommand(tc.pod)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("saveCommand = %v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || container != "certapi" || !slices.Equal(got, tc.want) {
				t.Errorf("saveCommand = %q, %q, %v; want certapi, %q", container, got, err, tc.want)
			}
		})
	}
}

func TestSplitSaveLog(t *testing.T) {
	record, rest := splitSaveLog("Wrote 100 bytes to stdout in 5ms; etcd's SHA-256 trailer verified.\nintegrity record: ZXhhbXBsZQ==\n")
	if record != "ZXhhbXBsZQ==" || rest != "Wrote 100 bytes to stdout in 5ms; etcd's SHA-256 trailer verified.\n" {
		t.Errorf("splitSaveLog = %q, %q", record, rest)
	}
	if record, _ := splitSaveLog("integrity: none (no --encryption-provider-config)\n"); record != "" {
		t.Errorf("splitSaveLog of a save without a record = %q; want none", record)
	}
}

func TestMatchRecord(t *testing.T) {
	sum := sha256.Sum256([]byte("snapshot"))
	rec := func(kind string, size int64, digest string) []byte {
		return []byte(fmt.Sprintf(`{"kind": %q, "size": %d, "sha256": %q, "sealed": "aGk="}`, kind, size, digest))
	}
	for _, tc := range []struct {
		name    string
		rec     []byte
		wantErr string
	}{
		{"the snapshot the record names", rec("CertapiSnapshotIntegrity", 8, hex.EncodeToString(sum[:])), ""},
		{"another size", rec("CertapiSnapshotIntegrity", 9, hex.EncodeToString(sum[:])), "not the snapshot its integrity record names"},
		{"another digest", rec("CertapiSnapshotIntegrity", 8, strings.Repeat("0", 64)), "not the snapshot its integrity record names"},
		{"not a record", rec("Other", 8, hex.EncodeToString(sum[:])), "not one certapi writes"},
		{"not JSON", []byte("x"), "not one certapi writes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := matchRecord(tc.rec, 8, sum[:])
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("matchRecord = %v; want %q", err, tc.wantErr)
			}
		})
	}
}
