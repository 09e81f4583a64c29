// Package incluster keeps what the etcd cluster of certapi's replicas needs from Kubernetes: the peer CA
// in a Secret of certapi's own namespace, created by the first replica that finds none, replaced there
// by the etcd leader's rotations and watched by every replica, and the record that a cluster was
// bootstrapped. pkg/etcdcluster itself takes the CA as a value and knows no API server.
package incluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/etcdcluster"
)

const (
	// DefaultSecretName is the peer CA Secret's name in certapi's namespace.
	DefaultSecretName = certapiv1alpha1.DefaultEtcdPeerCASecretName
	// LabelPeerCA ("true") marks the peer CA Secret.
	LabelPeerCA = "certapi.dev/etcd-peer-ca"
	// AnnotationBootstrapped records when a member bootstrapped the etcd cluster (RFC 3339) and which.
	// While it is set, ordinal 0 without data never bootstraps while other members' pods exist.
	AnnotationBootstrapped = "certapi.dev/etcd-bootstrapped"
	// AnnotationNoDataPrefix + <member> records when that member, starting, found no data and waited
	// (RFC 3339). Ordinal 0 bootstraps anew after a cluster existed only when every other member reported
	// so recently (etcdcluster.DecideStart); a bootstrap removes them.
	AnnotationNoDataPrefix = "certapi.dev/etcd-no-data."
	// keyBundle is the Secret key of the bundle every member trusts.
	keyBundle = "ca.crt"
	// keyChain is the Secret key of the CA's chain to its predecessors (etcdcluster.PeerCA.Chain),
	// absent before the first rotation.
	keyChain = "chain.crt"
)

// PeerCASecret is the Secret that holds the peer CA: tls.crt and tls.key the CA that signs member
// certificates, ca.crt the bundle members trust (the CA, and during a rotation the one it replaces
// too), chain.crt the CA cross-signed by its predecessors. It is the etcdcluster.PeerCAStore of a
// cluster: the etcd leader replaces the CA in it (Replace), and every replica follows it (Watch).
type PeerCASecret struct {
	Client          kubernetes.Interface
	Namespace, Name string
	// Member names this member in the bootstrap record.
	Member string
	// PublicOnly keeps the CA's public part only in the Secret (tls.key empty): the members keep the key
	// in their own etcd (etcdcluster.Config.PeerCARecordKey). A Secret that still holds a key is read with
	// it, until the etcd leader drops it (DropKey). Only the Designated member creates the Secret then
	// (it alone can hold the key of a new cluster's CA); the others wait for it.
	PublicOnly bool
	// Designated is true for ordinal 0.
	Designated bool
}

// errNoPeerCAYet means the Secret does not exist and this member may not create it: ordinal 0 does.
var errNoPeerCAYet = errors.New("the etcd peer CA Secret does not exist yet; the first member (ordinal 0) creates it")

// LoadOrCreate reads the peer CA, or creates it when the Secret does not exist. Creation is
// create-only: of replicas starting together one wins, and the others read the winner's CA. Errors that
// may pass (kube-apiserver unreachable or overloaded while the pod starts) are retried with backoff until
// ctx ends; the others (forbidden, a Secret that does not hold a CA) are returned at once.
func (s *PeerCASecret) LoadOrCreate(ctx context.Context) (*etcdcluster.PeerCA, error) {
	var ca *etcdcluster.PeerCA
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		ca, err = s.loadOrCreateRetried(ctx)
		if errors.Is(err, errNoPeerCAYet) {
			klog.FromContext(ctx).Info("Waiting for the etcd peer CA Secret", "secret", klog.KRef(s.Namespace, s.Name), "reason", err.Error())
			return false, nil
		}
		return err == nil, err
	})
	return ca, err
}

// loadOrCreateRetried is loadOrCreate, retried with backoff while the errors may pass.
func (s *PeerCASecret) loadOrCreateRetried(ctx context.Context) (*etcdcluster.PeerCA, error) {
	var ca *etcdcluster.PeerCA
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 8, Cap: 10 * time.Second}
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		var err error
		ca, err = s.loadOrCreate(ctx)
		switch {
		case err == nil:
			return true, nil
		case transient(err):
			last = err
			klog.FromContext(ctx).Info("Reading the etcd peer CA failed; retrying", "secret", klog.KRef(s.Namespace, s.Name), "err", err)
			return false, nil
		default:
			return false, err
		}
	})
	if err != nil && last != nil && !errors.Is(err, last) {
		return nil, fmt.Errorf("%w (last: %w)", err, last)
	}
	return ca, err
}

// transient reports whether err may pass by itself.
func transient(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// No answer from kube-apiserver at all (connection refused, DNS, timeout), or not a call's error.
		var urlErr *url.Error
		var netErr net.Error
		return errors.As(err, &urlErr) || errors.As(err, &netErr)
	}
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || apierrors.IsUnexpectedServerError(err)
}

func (s *PeerCASecret) loadOrCreate(ctx context.Context) (*etcdcluster.PeerCA, error) {
	secrets := s.Client.CoreV1().Secrets(s.Namespace)
	sec, err := secrets.Get(ctx, s.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if s.PublicOnly && !s.Designated {
			return nil, errNoPeerCAYet
		}
		ca, cerr := etcdcluster.NewPeerCA(time.Now(), etcdcluster.DefaultPeerCADuration)
		if cerr != nil {
			return nil, cerr
		}
		keyPEM, cerr := s.storedKey(ca)
		if cerr != nil {
			return nil, cerr
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace, Labels: map[string]string{LabelPeerCA: "true"}},
			Type:       corev1.SecretTypeTLS,
			Data: map[string][]byte{
				corev1.TLSCertKey:       ca.CertificatePEM(),
				corev1.TLSPrivateKeyKey: keyPEM,
				keyBundle:               ca.CertificatePEM(),
			},
		}
		created, cerr := secrets.Create(ctx, sec, metav1.CreateOptions{FieldManager: certapiv1alpha1.FieldManager})
		switch {
		case cerr == nil:
			klog.FromContext(ctx).Info("Created the etcd peer CA", "secret", klog.KObj(created), "notAfter", ca.Certificate.NotAfter)
			return ca, nil
		case apierrors.IsAlreadyExists(cerr):
			sec, err = secrets.Get(ctx, s.Name, metav1.GetOptions{})
		default:
			return nil, fmt.Errorf("creating the etcd peer CA Secret %s/%s: %w", s.Namespace, s.Name, cerr)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the etcd peer CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	st, err := s.state(sec)
	if err != nil {
		return nil, err
	}
	return st.CA, nil
}

// state reads the peer CA and its rotation request from sec.
func (s *PeerCASecret) state(sec *corev1.Secret) (etcdcluster.PeerCAState, error) {
	ca, err := etcdcluster.LoadPeerCA(sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey], sec.Data[keyBundle], sec.Data[keyChain])
	if err != nil {
		return etcdcluster.PeerCAState{}, fmt.Errorf("the etcd peer CA Secret %s/%s (keys tls.crt, tls.key, ca.crt, chain.crt): %w", s.Namespace, s.Name, err)
	}
	return etcdcluster.PeerCAState{
		CA:         ca,
		KeyInStore: ca.Key != nil,
		Requested:  sec.Annotations[certapiv1alpha1.AnnotationEtcdPeerCARotate],
		Handled:    sec.Annotations[certapiv1alpha1.AnnotationEtcdPeerCARotated],
	}, nil
}

// Replace stores next in place of cur: the Secret's data become next's (tls.crt, tls.key, ca.crt and
// chain.crt), and handled, when not empty, is recorded as the request acted on. The patch is guarded
// by the resourceVersion read and by the Secret still holding cur, so that of two replicas that both
// believe they lead, one changes the Secret and the other fails.
func (s *PeerCASecret) Replace(ctx context.Context, cur, next *etcdcluster.PeerCA, handled string) error {
	secrets := s.Client.CoreV1().Secrets(s.Namespace)
	sec, held, err := s.read(ctx)
	if err != nil {
		return err
	}
	if !held.CA.Equal(cur) {
		return fmt.Errorf("the etcd peer CA Secret %s/%s no longer holds the CA %s this rotation started from; not replaced",
			s.Namespace, s.Name, cur.Certificate.SerialNumber.Text(16))
	}
	keyPEM, err := s.storedKey(next)
	if err != nil {
		return err
	}
	data := map[string]any{
		corev1.TLSCertKey:       next.CertificatePEM(),
		corev1.TLSPrivateKeyKey: keyPEM,
		keyBundle:               next.TrustPEM(),
		keyChain:                nil,
	}
	if len(next.Chain) > 0 {
		data[keyChain] = next.Chain
	}
	meta := map[string]any{"resourceVersion": sec.ResourceVersion}
	if handled != "" {
		meta["annotations"] = map[string]any{certapiv1alpha1.AnnotationEtcdPeerCARotated: handled}
	}
	// A merge patch that carries the resourceVersion read applies only to the Secret as read.
	patch, err := json.Marshal(map[string]any{"metadata": meta, "data": data})
	if err != nil {
		return fmt.Errorf("encoding the rotated etcd peer CA: %w", err)
	}
	if _, err := secrets.Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: certapiv1alpha1.FieldManager}); err != nil {
		return fmt.Errorf("storing the rotated etcd peer CA in Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// Current reads the CA the Secret holds now.
func (s *PeerCASecret) Current(ctx context.Context) (*etcdcluster.PeerCA, error) {
	_, st, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	return st.CA, nil
}

// read gets the Secret and the state it holds.
func (s *PeerCASecret) read(ctx context.Context) (*corev1.Secret, etcdcluster.PeerCAState, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return nil, etcdcluster.PeerCAState{}, fmt.Errorf("reading the etcd peer CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	st, err := s.state(sec)
	if err != nil {
		return nil, etcdcluster.PeerCAState{}, err
	}
	return sec, st, nil
}

// storedKey is what the Secret's tls.key holds of ca: its key, or nothing when PublicOnly (a Secret of
// type kubernetes.io/tls must have the field).
func (s *PeerCASecret) storedKey(ca *etcdcluster.PeerCA) ([]byte, error) {
	if s.PublicOnly {
		return []byte{}, nil
	}
	return ca.KeyPEM()
}

// DropKey empties the Secret's tls.key and, with rotate, asks for that rotation in the same patch (the
// annotation `kubectl certapi rotate --etcd-peer` sets), guarded like Replace by the resourceVersion read
// and by the Secret still holding ca.
func (s *PeerCASecret) DropKey(ctx context.Context, ca *etcdcluster.PeerCA, rotate string) error {
	sec, held, err := s.read(ctx)
	if err != nil {
		return err
	}
	if !held.CA.Equal(ca) {
		return fmt.Errorf("the etcd peer CA Secret %s/%s no longer holds the CA %s; its key is not dropped", s.Namespace, s.Name, ca.Certificate.SerialNumber.Text(16))
	}
	meta := map[string]any{"resourceVersion": sec.ResourceVersion}
	if rotate != "" {
		meta["annotations"] = map[string]any{certapiv1alpha1.AnnotationEtcdPeerCARotate: rotate}
	}
	patch, err := json.Marshal(map[string]any{
		"metadata": meta,
		"data":     map[string]any{corev1.TLSPrivateKeyKey: []byte{}},
	})
	if err != nil {
		return fmt.Errorf("encoding the etcd peer CA Secret's patch: %w", err)
	}
	if _, err := s.Client.CoreV1().Secrets(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: certapiv1alpha1.FieldManager}); err != nil {
		return fmt.Errorf("removing the key from the etcd peer CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// Watch follows the Secret until ctx ends, calling fn with its state each time it changes (and once at
// the start): one list and one watch of this Secret alone, re-established by the informer when the
// server ends it, and no call in between. A Secret that does not hold a valid CA is logged and skipped.
func (s *PeerCASecret) Watch(ctx context.Context, fn func(etcdcluster.PeerCAState)) error {
	factory := informers.NewSharedInformerFactoryWithOptions(s.Client, 0, informers.WithNamespace(s.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.Name).String()
		}))
	informer := factory.Core().V1().Secrets().Informer()
	handle := func(obj any) {
		sec, ok := obj.(*corev1.Secret)
		if !ok || sec.Name != s.Name {
			return
		}
		st, err := s.state(sec)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Ignoring the etcd peer CA Secret's change")
			return
		}
		fn(st)
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handle,
		UpdateFunc: func(_, obj any) { handle(obj) },
	}); err != nil {
		return fmt.Errorf("watching the etcd peer CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
	return nil
}

// Existed reports whether the Secret records a bootstrap.
func (s *PeerCASecret) Existed(ctx context.Context) (bool, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("reading the etcd peer CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	_, ok := sec.Annotations[AnnotationBootstrapped]
	return ok, nil
}

// Record notes on the Secret that this member bootstrapped the cluster, and removes every member's
// report of having no data.
func (s *PeerCASecret) Record(ctx context.Context) error {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading the etcd peer CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	annotations := map[string]any{AnnotationBootstrapped: fmt.Sprintf("%s by %s", time.Now().UTC().Format(time.RFC3339), s.Member)}
	for k := range sec.Annotations {
		if strings.HasPrefix(k, AnnotationNoDataPrefix) {
			annotations[k] = nil
		}
	}
	if err := s.patchAnnotations(ctx, annotations); err != nil {
		return fmt.Errorf("recording the etcd bootstrap on Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// ReportNoData notes on the Secret that this member found no data and waits for a cluster.
func (s *PeerCASecret) ReportNoData(ctx context.Context) error {
	if err := s.patchAnnotations(ctx, map[string]any{AnnotationNoDataPrefix + s.Member: time.Now().UTC().Format(time.RFC3339)}); err != nil {
		return fmt.Errorf("reporting on Secret %s/%s that this etcd member has no data: %w", s.Namespace, s.Name, err)
	}
	return nil
}

// ReportedNoData reports whether every one of members reported having no data within window.
func (s *PeerCASecret) ReportedNoData(ctx context.Context, members []string, window time.Duration) (bool, error) {
	sec, err := s.Client.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("reading the etcd peer CA Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	for _, m := range members {
		at, err := time.Parse(time.RFC3339, sec.Annotations[AnnotationNoDataPrefix+m])
		if err != nil || time.Since(at) > window {
			return false, nil
		}
	}
	return true, nil
}

func (s *PeerCASecret) patchAnnotations(ctx context.Context, annotations map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = s.Client.CoreV1().Secrets(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: certapiv1alpha1.FieldManager})
	return err
}

// StatefulSetReplicas returns DesiredMembers for the StatefulSet name in namespace: its spec.replicas, or
// ok false when it cannot be read (then only the dead-member timeout removes members).
func StatefulSetReplicas(client kubernetes.Interface, namespace, name string) func(context.Context) (int, bool) {
	return func(ctx context.Context) (int, bool) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		sts, err := client.AppsV1().StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil || sts.Spec.Replicas == nil {
			klog.FromContext(ctx).V(2).Info("Cannot read the StatefulSet's replicas; scaled-away members wait out the dead-member timeout", "statefulset", klog.KRef(namespace, name), "err", err)
			return 0, false
		}
		return int(*sts.Spec.Replicas), true
	}
}
