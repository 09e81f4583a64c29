package leader

import (
	"fmt"
	"strings"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// kubeAPI is an API of kube-apiserver that one of the leader's loops needs and that an older Kubernetes
// does not serve: without it certapi leaves that loop off and runs everything else.
type kubeAPI struct {
	// Name is the API's kind, as the metric certapi_kube_api_served{api} and the condition name it.
	Name string
	// Resource is its resource in certificates.k8s.io/v1.
	Resource string
	// Since is the first Kubernetes minor that serves it in certificates.k8s.io/v1.
	Since string
	// Off says what certapi leaves off without it.
	Off string
}

// The certificates.k8s.io/v1 APIs the leader's loops use when kube-apiserver serves them: ClusterTrustBundles
// and PodCertificateRequests are GA in Kubernetes 1.37. Earlier minors serve them at most as alpha or beta
// (off by default, and of another shape), which certapi does not use.
var (
	apiClusterTrustBundle = kubeAPI{
		Name: "ClusterTrustBundle", Resource: "clustertrustbundles", Since: "1.37",
		Off: "no ClusterTrustBundle is published for signer certapi.dev/serving",
	}
	apiPodCertificateRequest = kubeAPI{
		Name: "PodCertificateRequest", Resource: "podcertificaterequests", Since: "1.37",
		Off: "signer certapi.dev/serving answers no PodCertificateRequest (no podCertificate volumes)",
	}
	optionalAPIs = []kubeAPI{apiClusterTrustBundle, apiPodCertificateRequest}
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

// apisDecision is what the leader does about the optional APIs in one term.
type apisDecision struct {
	// On says, by kubeAPI.Name, whether each optional API is served, and so whether its loop runs.
	On map[string]bool
	// Missing are those not served, in the order of optionalAPIs; each gets a log line.
	Missing []kubeAPI
	// Condition is CertificateAuthority/default's APIsServed condition.
	Condition metav1.Condition
	// Server names kube-apiserver with its version, as the condition and the log lines do.
	Server string
}

// decideAPIs says which of the optional APIs the leader uses, from the resources kube-apiserver serves in
// certificates.k8s.io/v1 (servedCertificatesV1) and its version (empty when it could not be read), and
// what status says about them.
func decideAPIs(served map[string]bool, serverVersion string) apisDecision {
	d := apisDecision{On: map[string]bool{}, Server: "kube-apiserver"}
	if serverVersion != "" {
		d.Server += " " + serverVersion
	}
	server := d.Server
	var off []string
	for _, a := range optionalAPIs {
		d.On[a.Name] = served[a.Resource]
		if !d.On[a.Name] {
			d.Missing = append(d.Missing, a)
			off = append(off, a.notServed(server))
		}
	}
	d.Condition = metav1.Condition{Type: certapiv1alpha1.ConditionAPIsServed, Status: metav1.ConditionTrue,
		Reason: certapiv1alpha1.APIsServedReasonAllServed, Message: server + " serves every API certapi uses"}
	if len(off) > 0 {
		d.Condition.Status, d.Condition.Reason = metav1.ConditionFalse, certapiv1alpha1.APIsServedReasonNotServed
		d.Condition.Message = strings.Join(off, "; ") + "; everything else runs"
	}
	return d
}

// notServed says, in a log line or a condition's message, that server lacks a and what is off.
func (a kubeAPI) notServed(server string) string {
	return fmt.Sprintf("%s serves no %s %s (Kubernetes %s or later does): %s", server, certificatesv1.SchemeGroupVersion, a.Resource, a.Since, a.Off)
}
