// Command podcertnode stands in for a node's kubelet where PodCertificateRequests are concerned: it runs
// kubelet's own podcertificate manager (k8s.io/kubernetes/pkg/kubelet/podcertificate.IssuingManager)
// for one Node, as that node (its kubeconfig authenticates as system:node:<name>), for the pods bound to
// it, and writes what the manager hands the volume host, as kubelet would write the projected volume:
//
//	<dir>/<namespace>/<pod>/<volume>/<source index>/credentialbundle.pem   the key, then the chain
//	<dir>/<namespace>/<pod>/<volume>/<source index>/error                  why there is none (yet)
//
// Files are replaced atomically whenever what the manager returns changes. No container runs: the tests
// read the files. It runs until SIGINT or SIGTERM.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/kubelet/podcertificate"
	"k8s.io/utils/clock"
)

// syncInterval is how often the volumes are brought up to date with the manager, as kubelet's volume
// manager remounts projected volumes.
const syncInterval = 100 * time.Millisecond

func main() {
	kubeconfig := flag.String("kubeconfig", "", "Kubeconfig that authenticates as system:node:<node>.")
	node := flag.String("node", "", "Name of the Node.")
	dir := flag.String("dir", "", "Directory to write the volumes into.")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *node == "" || *dir == "" {
		fmt.Fprintln(os.Stderr, "podcertnode: --kubeconfig, --node and --dir are required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, types.NodeName(*node), *dir); err != nil {
		fmt.Fprintf(os.Stderr, "podcertnode: %v\n", err)
		os.Exit(1)
	}
}

// pods is the manager's PodManager: the pods bound to the node, from the node's pod informer.
type pods struct{ store cache.Indexer }

const byUID = "uid"

func (p pods) GetPodByUID(uid types.UID) (*corev1.Pod, bool) {
	objs, err := p.store.ByIndex(byUID, string(uid))
	if err != nil || len(objs) == 0 {
		return nil, false
	}
	return objs[0].(*corev1.Pod), true
}

func (p pods) GetPods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range p.store.List() {
		out = append(out, o.(*corev1.Pod))
	}
	return out
}

func run(ctx context.Context, kubeconfig string, node types.NodeName, dir string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading %s: %w", kubeconfig, err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	// What kubelet watches, as the Node authorizer lets a node watch it: its pods, its
	// PodCertificateRequests and its Node object, each selected by node name.
	byNode := func(field string) informers.SharedInformerOption {
		return informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(field, string(node)).String()
		})
	}
	podFactory := informers.NewSharedInformerFactoryWithOptions(kc, 0, byNode("spec.nodeName"))
	pcrFactory := informers.NewSharedInformerFactoryWithOptions(kc, 0, byNode("spec.nodeName"))
	nodeFactory := informers.NewSharedInformerFactoryWithOptions(kc, 0, byNode("metadata.name"))
	podInformer := podFactory.Core().V1().Pods().Informer()
	if err := podInformer.AddIndexers(cache.Indexers{byUID: func(obj any) ([]string, error) {
		return []string{string(obj.(*corev1.Pod).UID)}, nil
	}}); err != nil {
		return err
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kc.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: string(node)})

	pm := pods{store: podInformer.GetIndexer()}
	manager := podcertificate.NewIssuingManager(kc, pm, recorder,
		pcrFactory.Certificates().V1().PodCertificateRequests(), nodeFactory.Core().V1().Nodes(), node, clock.RealClock{})
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { manager.TrackPod(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { manager.TrackPod(ctx, obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok {
				manager.ForgetPod(ctx, pod)
			}
		},
	}); err != nil {
		return err
	}
	for _, f := range []informers.SharedInformerFactory{podFactory, pcrFactory, nodeFactory} {
		f.Start(ctx.Done())
		defer f.Shutdown()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		manager.Run(ctx)
	}()
	defer func() { <-done }()
	klog.InfoS("Running kubelet's podcertificate manager", "node", node, "dir", dir)

	written := map[string][]byte{}
	t := time.NewTicker(syncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, pod := range pm.GetPods() {
			for _, v := range pod.Spec.Volumes {
				if v.Projected == nil {
					continue
				}
				for i, src := range v.Projected.Sources {
					if src.PodCertificate == nil {
						continue
					}
					key, chain, err := manager.GetPodCertificateCredentialBundle(ctx, pod.Namespace, pod.Name, string(pod.UID), v.Name, i)
					at := filepath.Join(dir, pod.Namespace, pod.Name, v.Name, strconv.Itoa(i))
					name, other, content := "credentialbundle.pem", "error", append(append([]byte(nil), key...), chain...)
					if err != nil {
						name, other, content = "error", "credentialbundle.pem", []byte(err.Error())
					}
					path := filepath.Join(at, name)
					if bytes.Equal(written[path], content) {
						continue
					}
					if err := writeAtomically(path, content); err != nil {
						return err
					}
					written[path] = content
					// One of the two at a time: the bundle once there is one, else why not.
					_ = os.Remove(filepath.Join(at, other))
					delete(written, filepath.Join(at, other))
				}
			}
		}
	}
}

// writeAtomically writes content to path through a temporary file and a rename, so a reader sees the
// old content or the new, never half of it.
func writeAtomically(path string, content []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, content, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
