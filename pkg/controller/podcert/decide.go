package podcert

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/issuer"
)

// Reasons of a Denied condition beyond the two the API defines (certificatesv1's UnsupportedKeyType and
// InvalidUnverifiedUserAnnotations), also the reasons of the Warning Events.
const (
	// ReasonServingCertRequestNotFound (a Warning Event; the request stays pending): the
	// ServingCertRequest the volume names is not in the pod's namespace (or is being deleted).
	ReasonServingCertRequestNotFound = "ServingCertRequestNotFound"
	// ReasonServiceAccountNotAllowed: the request's spec.serviceAccountNames does not list the pod's
	// ServiceAccount.
	ReasonServiceAccountNotAllowed = "ServiceAccountNotAllowed"
	// ReasonPodMismatch: the pod, as the API has it, is not what the PodCertificateRequest says: gone,
	// another UID, node or ServiceAccount, or no podCertificate volume that names this request.
	ReasonPodMismatch = "PodMismatch"
	// ReasonInvalidCertificateRequest: the stub PKCS#10 request does not parse (kube-apiserver checked it,
	// so only a server that did not would let one through).
	ReasonInvalidCertificateRequest = "InvalidCertificateRequest"
	// ReasonLifetimeTooShort (a Failed condition): the Active CA ends within the hour the API requires a
	// pod certificate to last; the CA's rotation is overdue.
	ReasonLifetimeTooShort = "LifetimeTooShort"
	// ReasonIssued is the reason of the Issued condition.
	ReasonIssued = "Issued"
)

// AcceptedKeyTypes are the podCertificate volume keyTypes certapi signs: those kubelet offers that
// signer.CheckPublicKey accepts.
const AcceptedKeyTypes = "ECDSAP256, ECDSAP384, RSA3072, RSA4096"

// defaultMaxExpiration is kube-apiserver's default spec.maxExpirationSeconds (24 hours), for a
// PodCertificateRequest that somehow lacks it.
const defaultMaxExpiration = 24 * time.Hour

// refreshMargin is how far from notBefore and from notAfter kube-apiserver requires beginRefreshAt to be.
const refreshMargin = 10 * time.Minute

// Input is what Decide looks at: a PodCertificateRequest for certapi's signer, the pod it names as the API
// has it (nil when there is none), and the ServingCertRequest its userAnnotations name, from the pod's
// namespace (nil when there is none).
type Input struct {
	PCR     *certificatesv1.PodCertificateRequest
	Pod     *corev1.Pod
	Request *certapiv1alpha1.ServingCertRequest
}

// Decision is the answer to one PodCertificateRequest: a denial, a wait, or what to sign.
type Decision struct {
	// Deny says to deny with Reason and Message (a message that says what would be accepted).
	Deny bool
	// Wait says to leave the request pending, saying Reason and Message in a Warning Event, and to look
	// again when the ServingCertRequest it names appears: manifests applied in one go (kustomize,
	// Helm, a GitOps tool) may create the pod before its request, and a denial would be final.
	Wait    bool
	Reason  string
	Message string
	// Sign is what to sign when not denied: the request's identity and lifetime, the PCR's key, its
	// maxExpirationSeconds as MaxLifetime, on issuer.PathPCR.
	Sign issuer.Request
}

// RequestName returns the ServingCertRequest a PodCertificateRequest's userAnnotations name ("" for
// none), for the caller to look up before Decide.
func RequestName(pcr *certificatesv1.PodCertificateRequest) string {
	return pcr.Spec.UnverifiedUserAnnotations[certapiv1alpha1.UserAnnotationServingCertRequest]
}

// Precheck looks at what needs nothing but the PodCertificateRequest itself: the userAnnotations
// (exactly the one key certapi knows, naming a valid request name) and the key type. done says it has
// decided (a denial) and Decide would decide the same.
func Precheck(pcr *certificatesv1.PodCertificateRequest) (d Decision, done bool) {
	ns := pcr.Namespace
	var unknown []string
	for k := range pcr.Spec.UnverifiedUserAnnotations {
		if k != certapiv1alpha1.UserAnnotationServingCertRequest {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return deny(certificatesv1.PodCertificateRequestConditionInvalidUserConfig, fmt.Sprintf(
			"unknown userAnnotations key(s) %s; signer %s accepts only %s: <the name of a ServingCertRequest in namespace %s>",
			quoteAll(unknown), certapiv1alpha1.PodCertificateSignerName, certapiv1alpha1.UserAnnotationServingCertRequest, ns)), true
	}
	name := RequestName(pcr)
	if name == "" {
		return deny(certificatesv1.PodCertificateRequestConditionInvalidUserConfig, fmt.Sprintf(
			"the podCertificate volume's userAnnotations must name the ServingCertRequest: %s: <name of a ServingCertRequest in namespace %s>",
			certapiv1alpha1.UserAnnotationServingCertRequest, ns)), true
	}
	if msgs := utilvalidation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return deny(certificatesv1.PodCertificateRequestConditionInvalidUserConfig, fmt.Sprintf(
			"userAnnotations %s is %q, which cannot be the name of a ServingCertRequest: %s",
			certapiv1alpha1.UserAnnotationServingCertRequest, truncate(name), strings.Join(msgs, "; "))), true
	}
	csr, err := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request)
	if err != nil {
		return deny(ReasonInvalidCertificateRequest, "spec.stubPKCS10Request is not a PKCS#10 certificate request"), true
	}
	if kt, ok := keyType(csr.PublicKey); !ok {
		return deny(certificatesv1.PodCertificateRequestConditionUnsupportedKeyType, fmt.Sprintf(
			"signer %s does not sign %s keys; set the podCertificate volume's keyType to one of %s",
			certapiv1alpha1.PodCertificateSignerName, kt, AcceptedKeyTypes)), true
	}
	return Decision{}, false
}

// Decide answers a PodCertificateRequest. It checks, in order: what Precheck checks, the
// ServingCertRequest (it exists, else the request waits for it, and lists the pod's ServiceAccount), and
// the pod (it exists with the UID,
// node and ServiceAccount the PodCertificateRequest names, and mounts a podCertificate volume for
// certapi's signer that names this request).
func Decide(in Input) Decision {
	pcr := in.PCR
	ns := pcr.Namespace
	if d, done := Precheck(pcr); done {
		return d
	}
	name := RequestName(pcr)
	csr, _ := x509.ParseCertificateRequest(pcr.Spec.StubPKCS10Request) // Precheck parsed it

	req := in.Request
	if req == nil || req.DeletionTimestamp != nil {
		return Decision{Wait: true, Reason: ReasonServingCertRequestNotFound, Message: fmt.Sprintf(
			"there is no ServingCertRequest %q in namespace %s (a pod gets certificates only from a request in its own namespace); the pod waits until it is created with spec.serviceAccountNames: [%s]",
			name, ns, pcr.Spec.ServiceAccountName)}
	}
	if !slices.Contains(req.Spec.ServiceAccountNames, pcr.Spec.ServiceAccountName) {
		return deny(ReasonServiceAccountNotAllowed, fmt.Sprintf(
			"ServingCertRequest %s/%s does not list ServiceAccount %q in spec.serviceAccountNames%s; add it there to let its pods have the certificate",
			ns, name, pcr.Spec.ServiceAccountName, listed(req.Spec.ServiceAccountNames)))
	}

	if msg := podMismatch(in.Pod, pcr, name); msg != "" {
		return deny(ReasonPodMismatch, msg)
	}

	sign := issuer.RequestFor(ns, name, &req.Spec)
	sign.PublicKey = csr.PublicKey
	sign.Path = issuer.PathPCR
	sign.MaxLifetime = defaultMaxExpiration
	if m := pcr.Spec.MaxExpirationSeconds; m != nil {
		sign.MaxLifetime = time.Duration(*m) * time.Second
	}
	return Decision{Sign: sign}
}

// podMismatch returns why the pod does not match the PodCertificateRequest, or "".
func podMismatch(pod *corev1.Pod, pcr *certificatesv1.PodCertificateRequest, request string) string {
	id := pcr.Namespace + "/" + pcr.Spec.PodName
	switch {
	case pod == nil:
		return fmt.Sprintf("pod %s does not exist", id)
	case pod.UID != pcr.Spec.PodUID:
		return fmt.Sprintf("pod %s has UID %s, not %s: the pod this request was made for is gone", id, pod.UID, pcr.Spec.PodUID)
	case pod.DeletionTimestamp != nil:
		return fmt.Sprintf("pod %s is being deleted", id)
	case pod.Spec.NodeName != string(pcr.Spec.NodeName):
		return fmt.Sprintf("pod %s runs on node %q, not on %q", id, pod.Spec.NodeName, pcr.Spec.NodeName)
	case pod.Spec.ServiceAccountName != pcr.Spec.ServiceAccountName:
		return fmt.Sprintf("pod %s runs as ServiceAccount %q, not %q", id, pod.Spec.ServiceAccountName, pcr.Spec.ServiceAccountName)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			pc := src.PodCertificate
			if pc != nil && pc.SignerName == certapiv1alpha1.PodCertificateSignerName &&
				pc.UserAnnotations[certapiv1alpha1.UserAnnotationServingCertRequest] == request {
				return ""
			}
		}
	}
	return fmt.Sprintf("pod %s has no podCertificate volume for signer %s whose userAnnotations name ServingCertRequest %q",
		id, certapiv1alpha1.PodCertificateSignerName, request)
}

// keyType names a public key as a podCertificate volume's keyType does, and says whether certapi signs it.
func keyType(pub any) (string, bool) {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return "ECDSAP256", true
		case elliptic.P384():
			return "ECDSAP384", true
		case elliptic.P521():
			return "ECDSAP521", false
		}
		return "ECDSA " + k.Curve.Params().Name, false
	case *rsa.PublicKey:
		bits := k.N.BitLen()
		return fmt.Sprintf("RSA%d", bits), bits == 3072 || bits == 4096
	case ed25519.PublicKey:
		return "ED25519", false
	default:
		return fmt.Sprintf("%T", pub), false
	}
}

// BeginRefreshAt is when kubelet should refresh a pod certificate valid from notBefore to notAfter
// whose renewal time (issuer.Result.RenewalTime) is renewal: the renewal time, kept at least
// refreshMargin after notBefore and before notAfter as kube-apiserver requires.
func BeginRefreshAt(notBefore, notAfter, renewal time.Time) time.Time {
	lo, hi := notBefore.Add(refreshMargin), notAfter.Add(-refreshMargin)
	switch {
	case renewal.Before(lo):
		return lo
	case renewal.After(hi):
		return hi
	}
	return renewal
}

// LifetimeOK reports whether a leaf valid from notBefore to notAfter lasts the hour kube-apiserver
// requires of a pod certificate (the Active CA's end can cut it short).
func LifetimeOK(notBefore, notAfter time.Time) bool {
	return notAfter.Sub(notBefore) >= time.Hour
}

func deny(reason, msg string) Decision {
	return Decision{Deny: true, Reason: reason, Message: msg}
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = fmt.Sprintf("%q", truncate(s))
	}
	return strings.Join(q, ", ")
}

func listed(names []string) string {
	if len(names) == 0 {
		return " (it lists none)"
	}
	return " (it lists " + quoteAll(names) + ")"
}

// truncate shortens caller-supplied strings quoted in messages.
func truncate(s string) string {
	const limit = 63
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
