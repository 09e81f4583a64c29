package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

func init() {
	localSchemeBuilder.Register(addFieldLabelConversionFuncs)
}

// addFieldLabelConversionFuncs lets clients select ServingCertRequests by the Service or Secret they name.
func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	return scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind("ServingCertRequest"),
		func(label, value string) (string, string, error) {
			switch label {
			case "metadata.name", "metadata.namespace", "spec.serviceName", "spec.secretName":
				return label, value, nil
			default:
				return "", "", fmt.Errorf("field label %q is not supported for ServingCertRequest: use metadata.name, metadata.namespace, spec.serviceName or spec.secretName", label)
			}
		})
}
