package apiserver

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/controller"
	"github.com/certapi/certapi/pkg/issuer"
)

// publishedBundles reads back the CA bundles certapi had published, for a leader that finds no CA record
// (issuer.Config.PublishedBundles): the caBundle of certapi's own APIService and its signer-linked
// ClusterTrustBundle. Only these two, because a CA found there becomes trusted in every bundle certapi
// injects, so no one who could not already make kube-apiserver trust a CA for certapi may write them:
//
//   - the APIService v1alpha1.certapi.dev: writing it takes update on apiservices, cluster-wide, which
//     already lets its holder route certapi.dev to a server of their own;
//   - the ClusterTrustBundle certapi.dev:serving:ca with signerName certapi.dev/serving: kube-apiserver
//     lets only holders of the "attest" verb on that signer write a bundle linked to it (certapi's
//     ServiceAccount, which the chart's admission policy confines to this one object, and cluster
//     admins); a bundle of that name with another signer is not read.
//
// The other injection targets are not read: webhook configurations, CRDs and ConfigMaps belong to their
// owners (a ConfigMap to anyone who may edit it in its namespace), who could plant a CA there that
// certapi would then have every webhook and API server trust.
//
// An object that does not exist, a kind kube-apiserver does not serve (no ClusterTrustBundle before
// Kubernetes 1.33's v1beta1, v1 in 1.37) and a read RBAC refuses are left out with a log line; any other
// error is returned, so that the leader does not create a CA before it could look.
func publishedBundles(clients controller.Clients) func(ctx context.Context) ([]issuer.PublishedBundle, error) {
	return func(ctx context.Context) ([]issuer.PublishedBundle, error) {
		var out []issuer.PublishedBundle
		skip := func(source string, err error) bool {
			if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || apierrors.IsMethodNotSupported(err) {
				klog.FromContext(ctx).Info("Not reading a CA bundle certapi may have published", "source", source, "reason", err.Error())
				return true
			}
			return false
		}

		apiServiceSource := "APIService " + certapiv1alpha1.APIServiceName
		svc, err := clients.Aggregator.ApiregistrationV1().APIServices().Get(ctx, certapiv1alpha1.APIServiceName, metav1.GetOptions{})
		switch {
		case err == nil:
			if len(svc.Spec.CABundle) > 0 {
				out = append(out, issuer.PublishedBundle{Source: apiServiceSource, PEM: svc.Spec.CABundle})
			}
		case !skip(apiServiceSource, err):
			return nil, fmt.Errorf("reading %s: %w", apiServiceSource, err)
		}

		bundleSource := "ClusterTrustBundle " + certapiv1alpha1.ClusterTrustBundleName
		ctb, err := clients.Kube.CertificatesV1().ClusterTrustBundles().Get(ctx, certapiv1alpha1.ClusterTrustBundleName, metav1.GetOptions{})
		switch {
		case err == nil:
			if ctb.Spec.SignerName != certapiv1alpha1.PodCertificateSignerName {
				klog.FromContext(ctx).Info("Not reading a CA bundle: it is not linked to certapi's signer", "source", bundleSource, "signerName", ctb.Spec.SignerName)
			} else if ctb.Spec.TrustBundle != "" {
				out = append(out, issuer.PublishedBundle{Source: bundleSource, PEM: []byte(ctb.Spec.TrustBundle)})
			}
		case !skip(bundleSource, err):
			return nil, fmt.Errorf("reading %s: %w", bundleSource, err)
		}
		return out, nil
	}
}
