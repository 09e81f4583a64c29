package kubectlcertapi

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

func TestPeerRotationProgress(t *testing.T) {
	old := newCA(t, t0, 24*time.Hour)
	next := newCA(t, t0, 48*time.Hour)
	secret := func(handled string, trusted ...*signer.CA) *corev1.Secret {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "certapi-etcd-peer-ca", Annotations: map[string]string{
			certapiv1alpha1.AnnotationEtcdPeerCARotate: "v2",
		}}, Data: map[string][]byte{corev1.TLSCertKey: signer.EncodeBundle(trusted[0].Certificate)}}
		if handled != "" {
			sec.Annotations[certapiv1alpha1.AnnotationEtcdPeerCARotated] = handled
		}
		var bundle []byte
		for _, ca := range trusted {
			bundle = append(bundle, signer.EncodeBundle(ca.Certificate)...)
		}
		sec.Data[certapiv1alpha1.SecretKeyCABundle] = bundle
		return sec
	}
	tests := []struct {
		name     string
		sec      *corev1.Secret
		want     string
		wantDone bool
	}{
		{"not begun", secret("", old), "requested", false},
		{"an earlier request handled, this one not begun", secret("v1", old), "requested", false},
		{"an earlier rotation still running", secret("v1", old, next), "requested", false},
		{"begun, both trusted", secret("v2", next, old), "trusts 2 CAs", false},
		{"done", secret("v2", next), "done:", true},
		{"no certificate", &corev1.Secret{}, "no peer CA certificate", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, done := PeerRotationProgress(tt.sec, "v2")
			if done != tt.wantDone || len(lines) == 0 || !strings.Contains(lines[len(lines)-1], tt.want) {
				t.Fatalf("PeerRotationProgress = %q, done %v; want the last line to contain %q, done %v", lines, done, tt.want, tt.wantDone)
			}
		})
	}
}
