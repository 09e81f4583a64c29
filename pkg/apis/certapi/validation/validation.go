// Package validation checks certapi objects against the rules of DESIGN.md. Every error names the field
// and says what is accepted, because the user sees it verbatim in a 422.
package validation

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/certapi/certapi/pkg/apis/certapi"
	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

const (
	// MinDuration is the shortest certificate lifetime a request may ask for.
	MinDuration = time.Hour
	// MaxDuration is the longest certificate lifetime a request may ask for.
	MaxDuration = 2160 * time.Hour
	// MinCADuration is the shortest CA lifetime.
	MinCADuration = 24 * time.Hour
	// MaxCADuration is the longest CA lifetime.
	MaxCADuration = 10 * 8760 * time.Hour
	// MaxDNSNames bounds spec.dnsNames; a certificate is not a directory.
	MaxDNSNames = 100
	// MaxServiceAccountNames bounds spec.serviceAccountNames.
	MaxServiceAccountNames = 100
	// maxTriggerLength bounds forceRotation and distrust, which are compared, never parsed.
	maxTriggerLength = 256
	// MaxUserMetadataBytes bounds what a writer puts into the metadata of a certapi object: its labels,
	// annotations, finalizers and ownerReferences, measured as their JSON encoding. Kubernetes alone
	// allows 256 KiB of annotations, and every certapi replica keeps every object in its watch cache and
	// etcd's raft log: at 256 KiB, a few hundred requests of one tenant would take every replica past its
	// memory limit. 32 KiB is still room for a dozen tools' labels and annotations and for kubectl's
	// last-applied-configuration (a copy of the object). With the largest spec the other limits allow
	// (MaxDNSNames names of up to 145 characters with the default cluster domain, MaxServiceAccountNames
	// of up to 253), a request is at most about 75 KB as JSON.
	MaxUserMetadataBytes = 32 * 1024
)

// KeyAlgorithms lists the accepted values of spec.keyAlgorithm, in the order error messages show them.
var KeyAlgorithms = []string{
	string(certapi.KeyAlgorithmECDSAP256),
	string(certapi.KeyAlgorithmECDSAP384),
	string(certapi.KeyAlgorithmRSA2048),
	string(certapi.KeyAlgorithmRSA3072),
	string(certapi.KeyAlgorithmRSA4096),
}

// NormalizeDNSName returns name in the form certapi stores and signs: lower case, without a trailing dot.
func NormalizeDNSName(name string) string {
	return strings.TrimSuffix(strings.ToLower(strings.TrimSpace(name)), ".")
}

// NormalizeDNSNames normalises every name and drops repeats, keeping the first occurrence's position.
func NormalizeDNSNames(names []string) []string {
	if names == nil {
		return nil
	}
	seen := sets.New[string]()
	out := make([]string, 0, len(names))
	for _, n := range names {
		n = NormalizeDNSName(n)
		if seen.Has(n) {
			continue
		}
		seen.Insert(n)
		out = append(out, n)
	}
	return out
}

// isAPIServerService reports whether a Service is kube-apiserver's own, which no request may name.
func isAPIServerService(name, namespace string) bool {
	return name == "kubernetes" && namespace == "default"
}

// ValidateServingCertRequest validates a request as created, with clusterDomain from the server's flags.
func ValidateServingCertRequest(obj *certapi.ServingCertRequest, clusterDomain string) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&obj.ObjectMeta, true, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateUserMetadataSize(&obj.ObjectMeta, nil, "ServingCertRequest", field.NewPath("metadata"))...)
	allErrs = append(allErrs, validateRenewRequest(&obj.ObjectMeta, field.NewPath("metadata", "annotations"))...)
	allErrs = append(allErrs, validateServingCertRequestSpec(&obj.Spec, obj.Namespace, clusterDomain, field.NewPath("spec"))...)
	return allErrs
}

// validateRenewRequest bounds the annotation certapi.dev/renew-requested-at as spec.forceRotation is
// bounded: certapi's caches keep its value, and the Secret delivered records it.
func validateRenewRequest(meta *metav1.ObjectMeta, fldPath *field.Path) field.ErrorList {
	if v, ok := meta.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt]; ok && len(v) > maxTriggerLength {
		return field.ErrorList{field.TooLong(fldPath.Key(certapiv1alpha1.AnnotationRenewRequestedAt), "", maxTriggerLength)}
	}
	return nil
}

// ValidateServingCertRequestUpdate validates a spec update. The spec stays mutable: a request is a
// declaration, and the next certificate follows it.
func ValidateServingCertRequestUpdate(newObj, oldObj *certapi.ServingCertRequest, clusterDomain string) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newObj.ObjectMeta, &oldObj.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateUserMetadataSize(&newObj.ObjectMeta, &oldObj.ObjectMeta, "ServingCertRequest", field.NewPath("metadata"))...)
	allErrs = append(allErrs, validateRenewRequest(&newObj.ObjectMeta, field.NewPath("metadata", "annotations"))...)
	allErrs = append(allErrs, validateServingCertRequestSpec(&newObj.Spec, newObj.Namespace, clusterDomain, field.NewPath("spec"))...)
	return allErrs
}

// ValidateServingCertRequestStatusUpdate validates a write to the status subresource.
func ValidateServingCertRequestStatusUpdate(newObj, oldObj *certapi.ServingCertRequest) field.ErrorList {
	statusPath := field.NewPath("status")
	allErrs := validateStatusUpdate(&newObj.ObjectMeta, &oldObj.ObjectMeta, newObj.Status.Conditions, newObj.Status.ObservedGeneration, statusPath)
	return allErrs
}

// validateStatusUpdate validates what every write to a status subresource is checked for: the metadata
// update, the conditions and observedGeneration.
func validateStatusUpdate(newMeta, oldMeta *metav1.ObjectMeta, conditions []metav1.Condition, observedGeneration int64, statusPath *field.Path) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(newMeta, oldMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, metav1validation.ValidateConditions(conditions, statusPath.Child("conditions"))...)
	allErrs = append(allErrs, apimachineryvalidation.ValidateNonnegativeField(observedGeneration, statusPath.Child("observedGeneration"))...)
	return allErrs
}

func validateServingCertRequestSpec(spec *certapi.ServingCertRequestSpec, namespace, clusterDomain string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList

	svcPath := fldPath.Child("serviceName")
	switch {
	case spec.ServiceName == "":
		allErrs = append(allErrs, field.Required(svcPath, "the name of a Service in this namespace (a DNS-1035 label)"))
	default:
		for _, msg := range utilvalidation.IsDNS1035Label(spec.ServiceName) {
			allErrs = append(allErrs, field.Invalid(svcPath, spec.ServiceName, msg))
		}
		if isAPIServerService(spec.ServiceName, namespace) {
			allErrs = append(allErrs, field.Forbidden(svcPath, "the Service \"kubernetes\" in namespace \"default\" is kube-apiserver's own; certapi does not issue for it"))
		}
	}

	dnsPath := fldPath.Child("dnsNames")
	if len(spec.DNSNames) > MaxDNSNames {
		allErrs = append(allErrs, field.TooMany(dnsPath, len(spec.DNSNames), MaxDNSNames))
	}
	for i, name := range spec.DNSNames {
		if err := validateDNSName(name, spec.ServiceName, namespace, clusterDomain); err != "" {
			allErrs = append(allErrs, field.Invalid(dnsPath.Index(i), name, err))
		}
	}

	durPath := fldPath.Child("duration")
	var duration time.Duration
	if spec.Duration == nil {
		allErrs = append(allErrs, field.Required(durPath, fmt.Sprintf("a duration from %s to %s", MinDuration, MaxDuration)))
	} else {
		duration = spec.Duration.Duration
		if duration < MinDuration || duration > MaxDuration {
			allErrs = append(allErrs, field.Invalid(durPath, spec.Duration.Duration.String(), fmt.Sprintf("must be from %s to %s", formatHours(MinDuration), formatHours(MaxDuration))))
		}
	}

	if spec.RenewBefore != nil {
		rbPath := fldPath.Child("renewBefore")
		switch rb := spec.RenewBefore.Duration; {
		case rb <= 0:
			allErrs = append(allErrs, field.Invalid(rbPath, rb.String(), "must be positive and less than spec.duration; leave it unset to renew at two thirds of the lifetime"))
		case spec.Duration != nil && rb >= duration:
			allErrs = append(allErrs, field.Invalid(rbPath, rb.String(), fmt.Sprintf("must be less than spec.duration (%s); leave it unset to renew at two thirds of the lifetime", duration)))
		}
	}

	if !sets.New(KeyAlgorithms...).Has(string(spec.KeyAlgorithm)) {
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("keyAlgorithm"), spec.KeyAlgorithm, KeyAlgorithms))
	}

	if spec.SecretName != "" {
		for _, msg := range utilvalidation.IsDNS1123Subdomain(spec.SecretName) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("secretName"), spec.SecretName, msg))
		}
	}

	saPath := fldPath.Child("serviceAccountNames")
	if len(spec.ServiceAccountNames) > MaxServiceAccountNames {
		allErrs = append(allErrs, field.TooMany(saPath, len(spec.ServiceAccountNames), MaxServiceAccountNames))
	}
	seen := sets.New[string]()
	for i, sa := range spec.ServiceAccountNames {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(sa, false) {
			allErrs = append(allErrs, field.Invalid(saPath.Index(i), sa, "must be the name of a ServiceAccount in this namespace: "+msg))
		}
		if seen.Has(sa) {
			allErrs = append(allErrs, field.Duplicate(saPath.Index(i), sa))
		}
		seen.Insert(sa)
	}
	return allErrs
}

// validateDNSName returns "" when name is an acceptable extra SAN for serviceName in namespace, and
// otherwise a message that says what is wrong and what would be accepted.
func validateDNSName(name, serviceName, namespace, clusterDomain string) string {
	accepted := fmt.Sprintf("accepted: <name>.%[1]s.svc or <name>.%[1]s.svc.%[2]s for a DNS-1035 <name>, or *.%[3]s.%[1]s.svc[.%[2]s] for the pods of a headless Service", namespace, clusterDomain, serviceName)
	if name != NormalizeDNSName(name) {
		// Create and update normalise before validating, so only a name with inner spaces lands here.
		return "must be lower case without surrounding spaces or a trailing dot; " + accepted
	}
	if name == "" {
		return "must not be empty; " + accepted
	}
	if net.ParseIP(name) != nil {
		return "IP addresses are not accepted: certificates name Services by DNS; " + accepted
	}
	if len(name) > utilvalidation.DNS1123SubdomainMaxLength {
		return fmt.Sprintf("must be at most %d characters; %s", utilvalidation.DNS1123SubdomainMaxLength, accepted)
	}

	var local string
	switch {
	case strings.HasSuffix(name, ".svc."+clusterDomain):
		local = strings.TrimSuffix(name, "."+clusterDomain)
	case strings.HasSuffix(name, ".svc"):
		local = name
	default:
		return "is not a cluster Service name (external names are not accepted); " + accepted
	}
	// local is now <first>[.<more>].<ns>.svc
	labels := strings.Split(strings.TrimSuffix(local, ".svc"), ".")
	if len(labels) < 2 {
		return "names no Service; " + accepted
	}
	ns := labels[len(labels)-1]
	if ns != namespace {
		return fmt.Sprintf("names a Service in namespace %q; a request may only name Services in its own namespace %q; %s", ns, namespace, accepted)
	}
	switch len(labels) {
	case 2:
		if labels[0] == "*" {
			return fmt.Sprintf("is a namespace-wide wildcard; only *.%s.%s.svc (the pods of this request's Service) is accepted", serviceName, namespace)
		}
		if msgs := utilvalidation.IsDNS1035Label(labels[0]); len(msgs) > 0 {
			return fmt.Sprintf("%q is not a Service name: %s; %s", labels[0], strings.Join(msgs, ", "), accepted)
		}
		if isAPIServerService(labels[0], ns) {
			return "names kube-apiserver's own Service; certapi does not issue for it"
		}
		return ""
	case 3:
		if labels[0] == "*" && labels[1] == serviceName {
			return ""
		}
		if labels[0] == "*" {
			return fmt.Sprintf("a wildcard is accepted only for this request's Service: *.%s.%s.svc; %s", serviceName, namespace, accepted)
		}
	}
	return "has too many labels before the namespace; " + accepted
}

func formatHours(d time.Duration) string {
	return fmt.Sprintf("%dh", int64(d/time.Hour))
}

// ValidateCertificateAuthority validates the CertificateAuthority as created. Only "default" may exist.
func ValidateCertificateAuthority(obj *certapi.CertificateAuthority) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMeta(&obj.ObjectMeta, false, validateCAName, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateUserMetadataSize(&obj.ObjectMeta, nil, "CertificateAuthority", field.NewPath("metadata"))...)
	allErrs = append(allErrs, validateCertificateAuthoritySpec(&obj.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateCertificateAuthorityUpdate validates a spec update of the CertificateAuthority.
func ValidateCertificateAuthorityUpdate(newObj, oldObj *certapi.CertificateAuthority) field.ErrorList {
	allErrs := apimachineryvalidation.ValidateObjectMetaUpdate(&newObj.ObjectMeta, &oldObj.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, ValidateUserMetadataSize(&newObj.ObjectMeta, &oldObj.ObjectMeta, "CertificateAuthority", field.NewPath("metadata"))...)
	allErrs = append(allErrs, validateCertificateAuthoritySpec(&newObj.Spec, field.NewPath("spec"))...)
	return allErrs
}

// ValidateCertificateAuthorityStatusUpdate validates a write to the CertificateAuthority's status.
func ValidateCertificateAuthorityStatusUpdate(newObj, oldObj *certapi.CertificateAuthority) field.ErrorList {
	statusPath := field.NewPath("status")
	allErrs := validateStatusUpdate(&newObj.ObjectMeta, &oldObj.ObjectMeta, newObj.Status.Conditions, newObj.Status.ObservedGeneration, statusPath)
	for i, c := range newObj.Status.Certificates {
		p := statusPath.Child("certificates").Index(i).Child("role")
		switch c.Role {
		case certapi.CARoleActive, certapi.CARoleNext, certapi.CARoleRetiring:
		default:
			allErrs = append(allErrs, field.NotSupported(p, c.Role, []string{string(certapi.CARoleActive), string(certapi.CARoleNext), string(certapi.CARoleRetiring)}))
		}
	}
	return allErrs
}

func validateCAName(name string, prefix bool) []string {
	if name != certapiv1alpha1.CertificateAuthorityName || prefix {
		return []string{fmt.Sprintf("the cluster has exactly one CertificateAuthority; only the name %q is accepted", certapiv1alpha1.CertificateAuthorityName)}
	}
	return nil
}

func validateCertificateAuthoritySpec(spec *certapi.CertificateAuthoritySpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if spec.Duration == nil {
		allErrs = append(allErrs, field.Required(fldPath.Child("duration"), fmt.Sprintf("a duration from %s to %s", formatHours(MinCADuration), formatHours(MaxCADuration))))
	} else if d := spec.Duration.Duration; d < MinCADuration || d > MaxCADuration {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("duration"), d.String(), fmt.Sprintf("must be from %s to %s", formatHours(MinCADuration), formatHours(MaxCADuration))))
	}
	if len(spec.ForceRotation) > maxTriggerLength {
		allErrs = append(allErrs, field.TooLong(fldPath.Child("forceRotation"), "", maxTriggerLength))
	}
	if len(spec.Distrust) > maxTriggerLength {
		allErrs = append(allErrs, field.TooLong(fldPath.Child("distrust"), "", maxTriggerLength))
	}
	return allErrs
}

// UserMetadataBytes is the size MaxUserMetadataBytes bounds: the JSON encoding of meta's labels,
// annotations, finalizers and ownerReferences, the parts of an object's metadata its writers choose.
func UserMetadataBytes(meta *metav1.ObjectMeta) int {
	b, err := json.Marshal(struct {
		Labels          map[string]string       `json:"labels,omitempty"`
		Annotations     map[string]string       `json:"annotations,omitempty"`
		Finalizers      []string                `json:"finalizers,omitempty"`
		OwnerReferences []metav1.OwnerReference `json:"ownerReferences,omitempty"`
	}{meta.Labels, meta.Annotations, meta.Finalizers, meta.OwnerReferences})
	if err != nil {
		// Maps of strings, strings and plain structs always encode; count it as over any limit.
		return MaxUserMetadataBytes + 1
	}
	return len(b)
}

// ValidateUserMetadataSize refuses metadata whose UserMetadataBytes exceed MaxUserMetadataBytes. On an
// update (old not nil) metadata that does not grow is accepted, so that an object stored before the limit
// existed can still be edited down, have its finalizers removed, or be deleted.
func ValidateUserMetadataSize(meta, old *metav1.ObjectMeta, kind string, fldPath *field.Path) field.ErrorList {
	size := UserMetadataBytes(meta)
	if size <= MaxUserMetadataBytes || (old != nil && size <= UserMetadataBytes(old)) {
		return nil
	}
	return field.ErrorList{field.Forbidden(fldPath, fmt.Sprintf(
		"labels, annotations, finalizers and ownerReferences together are %d bytes (as JSON); a %s accepts at most %d bytes (%d KiB) of them, "+
			"because every certapi replica keeps every object in memory", size, kind, MaxUserMetadataBytes, MaxUserMetadataBytes/1024))}
}
