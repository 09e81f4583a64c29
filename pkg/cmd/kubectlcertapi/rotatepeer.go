package kubectlcertapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	watchtools "k8s.io/client-go/tools/watch"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/cmd/internal/byname"
	"github.com/certapi/certapi/pkg/signer"
)

// DefaultPeerRotateTimeout is how long `rotate --etcd-peer --wait` waits: the etcd leader looks every 5
// seconds, and members re-issue at once.
const DefaultPeerRotateTimeout = 5 * time.Minute

// runPeer asks for a rotation of the etcd peer CA: it sets the rotation annotation on the peer CA's
// Secret to a new value, and with --wait follows the Secret until the rotation it asked for is done.
func (o *rotateOptions) runPeer(ctx context.Context, c *clients) error {
	ns, _, err := o.namespace()
	if err != nil {
		return err
	}
	value, err := generatedValue(time.Now())
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{certapiv1alpha1.AnnotationEtcdPeerCARotate: value}}})
	if err != nil {
		return fmt.Errorf("encoding the patch: %w", err)
	}
	secrets := c.kube.CoreV1().Secrets(ns)
	sec, err := secrets.Patch(ctx, o.peerCASecret, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("no etcd peer CA Secret %s in namespace %s: give certapi's namespace with -n and the Secret's name with --etcd-peer-ca-secret "+
			"(the Helm chart's is <fullname>-etcd-peer-ca); only certapi's own etcd cluster (etcd.mode cluster) has one", o.peerCASecret, ns)
	}
	if err != nil {
		return fmt.Errorf("annotating the etcd peer CA Secret %s/%s: %w", ns, o.peerCASecret, err)
	}
	fmt.Fprintf(o.Out, "secret/%s annotated in namespace %s: %s=%s\n", o.peerCASecret, ns, certapiv1alpha1.AnnotationEtcdPeerCARotate, value)
	if !o.wait {
		fmt.Fprintln(o.Out, "the replica whose member is the etcd leader begins the rotation within seconds; `kubectl certapi status` shows where it stands")
		return nil
	}
	say := func(line string) { fmt.Fprintf(o.Out, "%s %s\n", time.Now().UTC().Format(time.TimeOnly), line) }
	var shown []string
	observe := func(sec *corev1.Secret) bool {
		lines, done := PeerRotationProgress(sec, value)
		for _, l := range newLines(shown, lines) {
			say(l)
		}
		shown = lines
		return done
	}
	if observe(sec) {
		return nil
	}
	waitCtx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	lw := byname.ListWatch[*corev1.SecretList](secrets, o.peerCASecret)
	_, err = watchtools.UntilWithSync(waitCtx, lw, &corev1.Secret{}, nil, func(ev watch.Event) (bool, error) {
		sec, ok := ev.Object.(*corev1.Secret)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		return observe(sec), nil
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(waitCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil:
		where := "nothing seen"
		if len(shown) > 0 {
			where = shown[len(shown)-1]
		}
		return fmt.Errorf("timed out after %s waiting for the etcd peer CA rotation; it goes on. Last seen: %s; `kubectl certapi status` says what it waits for", o.timeout, where)
	default:
		return fmt.Errorf("following the etcd peer CA rotation: %w", err)
	}
}

// PeerRotationProgress describes the peer CA Secret as lines, for the rotation asked for with value, and
// says whether it is done: the rotation began for value (the handled annotation holds it) and the
// bundle trusts only the CA that signs.
func PeerRotationProgress(sec *corev1.Secret, value string) (lines []string, done bool) {
	handled := sec.Annotations[certapiv1alpha1.AnnotationEtcdPeerCARotated]
	signing, err := signer.ParseBundle(sec.Data[corev1.TLSCertKey])
	if err != nil {
		return []string{"the Secret holds no peer CA certificate: " + err.Error()}, false
	}
	ca := signing[0]
	trusted, err := signer.ParseBundle(sec.Data[certapiv1alpha1.SecretKeyCABundle])
	if err != nil {
		return []string{"the Secret holds no trust bundle: " + err.Error()}, false
	}
	if handled != value {
		return []string{"requested; the etcd leader has not begun it yet"}, false
	}
	lines = append(lines, fmt.Sprintf("begun: the new peer CA %s signs, valid until %s; every member re-issues its certificate from it",
		signer.FormatSerialNumber(ca.SerialNumber), formatTime(ca.NotAfter)))
	if len(trusted) > 1 {
		return append(lines, fmt.Sprintf("the bundle trusts %d CAs until every member presents a certificate of the new one", len(trusted))), false
	}
	return append(lines, "done: every member presents a certificate of the new peer CA, and the old one has left the bundle"), true
}
