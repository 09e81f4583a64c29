package leader

import (
	"fmt"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
)

// The certificates.k8s.io/v1 resources the leader's loops use when kube-apiserver serves them.
const (
	resourceClusterTrustBundles    = "clustertrustbundles"
	resourcePodCertificateRequests = "podcertificaterequests"
)

// servedCertificatesV1 returns the resources of certificates.k8s.io/v1 that kube-apiserver serves:
// ClusterTrustBundles and PodCertificateRequests are GA in Kubernetes 1.37, and certapi runs without
// them on an older cluster.
func servedCertificatesV1(d discovery.DiscoveryInterface) (map[string]bool, error) {
	list, err := d.ServerResourcesForGroupVersion(certificatesv1.SchemeGroupVersion.String())
	if apierrors.IsNotFound(err) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("discovering the resources of %s: %w", certificatesv1.SchemeGroupVersion, err)
	}
	served := map[string]bool{}
	for _, r := range list.APIResources {
		served[r.Name] = true
	}
	return served, nil
}
