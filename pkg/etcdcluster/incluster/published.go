package incluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	aggregatorclient "k8s.io/kube-aggregator/pkg/client/clientset_generated/clientset"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// PublishedCA returns etcdcluster.Config.PublishedCA: "APIService v1alpha1.certapi.dev" when certapi's
// own APIService holds a caBundle, empty when it holds none or does not exist.
//
// certapi injects its CA bundle into its own APIService, which the chart and the kustomize bases create
// with none; an in-place change of the install (helm upgrade, kubectl apply of a new rendering, a GitOps
// sync) keeps the bundle certapi wrote, because no manifest sets the field (DESIGN.md, "Opting in to
// caBundle injection"). Uninstalling deletes the APIService. So a bundle there means that a certapi of
// this install ran with a CA, which is what the first member of a new etcd cluster must know before it
// bootstraps one (etcdcluster.DecideStart, rule 4). Only the APIService is read: writing it takes update
// on apiservices cluster-wide, and certapi's ServiceAccount may already get it. Any error but NotFound is
// returned, so that the member looks again rather than bootstrap without having looked.
func PublishedCA(client aggregatorclient.Interface) func(ctx context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		svc, err := client.ApiregistrationV1().APIServices().Get(ctx, certapiv1alpha1.APIServiceName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return "", nil
		case err != nil:
			return "", fmt.Errorf("reading APIService %s: %w", certapiv1alpha1.APIServiceName, err)
		case len(svc.Spec.CABundle) == 0:
			return "", nil
		}
		return "APIService " + certapiv1alpha1.APIServiceName, nil
	}
}
