package framework

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
)

// Node plays a kubelet's part on one Node of the control plane, for PodCertificateRequests: it makes them
// as system:node:<Name> (group system:nodes), so that kube-apiserver's Node authorizer and NodeRestriction
// admission check them as they check a real kubelet's, and it fills them in exactly as kubelet's
// podcertificate manager (k8s.io/kubernetes/pkg/kubelet/podcertificate) does.
type Node struct {
	// Name and UID are the Node object's.
	Name string
	UID  types.UID
	// Client acts as the node.
	Client kubernetes.Interface

	cp    *ControlPlane
	admin kubernetes.Interface
}

// NewNode creates the Node object name (or uses the one there is) and a client that authenticates as its
// kubelet. No kubelet runs: Pods bound to the node never start, and nothing reports the node's status.
func (cp *ControlPlane) NewNode(ctx context.Context, name string) (*Node, error) {
	admin, err := kubernetes.NewForConfig(cp.AdminConfig)
	if err != nil {
		return nil, fmt.Errorf("creating admin client: %w", err)
	}
	node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		node, err = admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("creating Node %s: %w", name, err)
	}
	cfg, err := cp.UserConfig("system:node:"+name, "system:nodes")
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the client of node %s: %w", name, err)
	}
	return &Node{Name: name, UID: node.UID, Client: client, cp: cp, admin: admin}, nil
}

// CreatePod creates pod bound to this node (spec.nodeName, as the scheduler would bind it), as the
// admin, and its ServiceAccount when it does not exist yet (no controller creates even "default" here).
func (n *Node) CreatePod(ctx context.Context, pod *corev1.Pod) (*corev1.Pod, error) {
	pod = pod.DeepCopy()
	pod.Spec.NodeName = n.Name
	if pod.Spec.ServiceAccountName == "" {
		pod.Spec.ServiceAccountName = "default"
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Spec.ServiceAccountName}}
	if _, err := n.admin.CoreV1().ServiceAccounts(pod.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err)
	}
	created, err := n.admin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating pod %s/%s on node %s: %w", pod.Namespace, pod.Name, n.Name, err)
	}
	return created, nil
}

// PodCertificateKey makes a key of a podCertificate volume's keyType as kubelet does: RSA3072, RSA4096,
// ECDSAP256, ECDSAP384, ECDSAP521 or ED25519.
func PodCertificateKey(keyType string) (crypto.Signer, error) {
	switch keyType {
	case "RSA3072":
		return rsa.GenerateKey(rand.Reader, 3072)
	case "RSA4096":
		return rsa.GenerateKey(rand.Reader, 4096)
	case "ECDSAP256":
		return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "ECDSAP384":
		return ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "ECDSAP521":
		return ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	case "ED25519":
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	}
	return nil, fmt.Errorf("unknown key type %q", keyType)
}

// CreatePodCertificateRequest makes, as this node's kubelet, the PodCertificateRequest for the
// podCertificate source of pod, for key: the ServiceAccount's UID read as the node, an empty stub PKCS#10
// request signed by key, generateName "req-", the pod as owner, and the source's signerName,
// maxExpirationSeconds and userAnnotations copied verbatim, as kubelet's createPodCertificateRequest does.
// Like kubelet it retries, until ctx ends, while the Node authorizer or NodeRestriction refuse: they may
// not know of a pod created a moment ago. The error is then the last refusal.
func (n *Node) CreatePodCertificateRequest(ctx context.Context, pod *corev1.Pod, source *corev1.PodCertificateProjection, key crypto.Signer) (*certificatesv1.PodCertificateRequest, error) {
	if source == nil {
		return nil, errors.New("CreatePodCertificateRequest: no podCertificate source")
	}
	stub, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, fmt.Errorf("making the stub PKCS#10 request: %w", err)
	}
	req := &certificatesv1.PodCertificateRequest{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:    pod.Namespace,
			GenerateName: "req-",
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Pod",
				Name:       pod.Name,
				UID:        pod.UID,
			}},
		},
		Spec: certificatesv1.PodCertificateRequestSpec{
			SignerName:                source.SignerName,
			PodName:                   pod.Name,
			PodUID:                    pod.UID,
			ServiceAccountName:        pod.Spec.ServiceAccountName,
			NodeName:                  types.NodeName(n.Name),
			NodeUID:                   n.UID,
			MaxExpirationSeconds:      source.MaxExpirationSeconds,
			StubPKCS10Request:         stub,
			UnverifiedUserAnnotations: source.UserAnnotations,
		},
	}
	// The Node authorizer and NodeRestriction judge from informers that learn of a new pod a moment
	// after it is created; kubelet's queue retries, and so does this, until ctx ends.
	var created *certificatesv1.PodCertificateRequest
	var last error
	err = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 20 * time.Millisecond, Factor: 2, Steps: 1 << 20, Cap: time.Second},
		func(ctx context.Context) (bool, error) {
			sa, err := n.Client.CoreV1().ServiceAccounts(pod.Namespace).Get(ctx, pod.Spec.ServiceAccountName, metav1.GetOptions{})
			if err != nil {
				last = fmt.Errorf("getting ServiceAccount %s/%s as node %s: %w", pod.Namespace, pod.Spec.ServiceAccountName, n.Name, err)
				return false, nil
			}
			req.Spec.ServiceAccountUID = sa.UID
			created, err = n.Client.CertificatesV1().PodCertificateRequests(pod.Namespace).Create(ctx, req, metav1.CreateOptions{})
			if err != nil {
				last = fmt.Errorf("creating the PodCertificateRequest of pod %s/%s as node %s: %w", pod.Namespace, pod.Name, n.Name, err)
				return false, nil
			}
			return true, nil
		})
	if err != nil {
		if last != nil {
			return nil, last
		}
		return nil, err
	}
	return created, nil
}

// WaitPodCertificateRequest watches, as this node (kubelet's informer is limited to its node by a field
// selector, as the Node authorizer requires), until the PodCertificateRequest ns/name is Issued, Denied or
// Failed, and returns it then. ctx bounds the wait.
func (n *Node) WaitPodCertificateRequest(ctx context.Context, namespace, name string) (*certificatesv1.PodCertificateRequest, error) {
	sel := fields.OneTermEqualSelector("spec.nodeName", n.Name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return n.Client.CertificatesV1().PodCertificateRequests(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return n.Client.CertificatesV1().PodCertificateRequests(namespace).Watch(ctx, o)
		},
	}
	ev, err := watchtools.UntilWithSync(ctx, lw, &certificatesv1.PodCertificateRequest{}, nil, func(e watch.Event) (bool, error) {
		pcr, ok := e.Object.(*certificatesv1.PodCertificateRequest)
		return ok && pcr.Name == name && PodCertificateRequestAnswered(pcr) != "", nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for PodCertificateRequest %s/%s to be answered: %w", namespace, name, err)
	}
	return ev.Object.(*certificatesv1.PodCertificateRequest), nil
}

// PodCertificateRequestAnswered returns the type of pcr's terminal condition (Issued, Denied or Failed),
// or "" while it is pending.
func PodCertificateRequestAnswered(pcr *certificatesv1.PodCertificateRequest) string {
	for _, c := range pcr.Status.Conditions {
		switch c.Type {
		case certificatesv1.PodCertificateRequestConditionTypeIssued, certificatesv1.PodCertificateRequestConditionTypeDenied,
			certificatesv1.PodCertificateRequestConditionTypeFailed:
			return c.Type
		}
	}
	return ""
}

// PodCertificateVolume is a projected volume named name holding a podCertificate source (a credential
// bundle, credentialbundle.pem) and, when trustSigner is set, the signer's ClusterTrustBundles (ca.crt).
func PodCertificateVolume(name string, source corev1.PodCertificateProjection, trustSigner string) corev1.Volume {
	if source.CredentialBundlePath == "" && source.KeyPath == "" {
		source.CredentialBundlePath = "credentialbundle.pem"
	}
	sources := []corev1.VolumeProjection{{PodCertificate: &source}}
	if trustSigner != "" {
		sources = append(sources, corev1.VolumeProjection{ClusterTrustBundle: &corev1.ClusterTrustBundleProjection{
			SignerName:    &trustSigner,
			LabelSelector: &metav1.LabelSelector{},
			Path:          "ca.crt",
		}})
	}
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}
}

// Kubelet is kubelet's own podcertificate manager running for a Node (see StartKubelet).
type Kubelet struct {
	*Process
	// Dir holds the volumes: <Dir>/<namespace>/<pod>/<volume>/<source index>/credentialbundle.pem, or
	// an error file that says why there is none.
	Dir string
}

// StartKubelet runs podcertnode (built by `make tools` from hack/tools, or $PODCERTNODE_BIN) for this
// node: kubelet's own podcertificate manager (k8s.io/kubernetes/pkg/kubelet/podcertificate), as the
// node, for the pods bound to it, writing what it hands the volume host into files under a directory of
// the control plane's. Stop it with Stop; the control plane's Stop does not.
func (n *Node) StartKubelet() (*Kubelet, error) {
	bin, err := toolBinary("podcertnode", EnvPodCertNodeBin)
	if err != nil {
		return nil, err
	}
	base := filepath.Join(n.cp.Dir, "nodes", n.Name)
	if err := os.MkdirAll(base, 0o700); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(base, "kubeconfig")
	if err := n.cp.writeUserKubeconfig(kubeconfig, "system:node:"+n.Name, "system:nodes"); err != nil {
		return nil, err
	}
	dir := filepath.Join(base, "volumes")
	name := "podcertnode-" + n.Name
	p, err := StartProcess(name, n.cp.logPath(name), bin, []string{"--kubeconfig=" + kubeconfig, "--node=" + n.Name, "--dir=" + dir, "-v=4"}, nil)
	if err != nil {
		return nil, err
	}
	n.cp.mu.Lock()
	n.cp.logs[name] = p.logPath
	n.cp.mu.Unlock()
	return &Kubelet{Process: p, Dir: dir}, nil
}

// Volume returns what the kubelet wrote for the podCertificate source at index source of volume of
// pod: the credential bundle (the PKCS#8 key, then the chain), or the reason there is none ("" while
// neither is written).
func (k *Kubelet) Volume(pod *corev1.Pod, volume string, source int) (bundle []byte, why string) {
	at := filepath.Join(k.Dir, pod.Namespace, pod.Name, volume, strconv.Itoa(source))
	if b, err := os.ReadFile(filepath.Join(at, "credentialbundle.pem")); err == nil {
		return b, ""
	}
	if b, err := os.ReadFile(filepath.Join(at, "error")); err == nil {
		return nil, string(b)
	}
	return nil, ""
}
