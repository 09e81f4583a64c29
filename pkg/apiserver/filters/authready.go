package filters

import (
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
)

// AuthenticationGate says whether delegated authentication is usable yet (readiness.Auth): nil once it
// is, else why not.
type AuthenticationGate interface {
	AuthenticationUsable() error
}

// retryUntilAuthenticationUsable answers 503 with Retry-After: 1 while delegated authentication is not
// usable, instead of letting the request through to be taken for system:anonymous and refused (403). The
// generic server serves as soon as it listens, and the CAs of the ConfigMap load a moment later, when its
// informer has synced: a Service sends nothing to a replica until /readyz passes, but kube-apiserver
// reaching certapi some other way (an ExternalName, a proxy) would meet that moment. client-go retries the
// 503. Health checks pass through, so that /readyz can say why.
func retryUntilAuthenticationUsable(next http.Handler, a AuthenticationGate, s runtime.NegotiatedSerializer) http.Handler {
	if a == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := a.AuthenticationUsable()
		if err == nil || isHealthPath(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		responsewriters.ErrorNegotiated(apierrors.NewServiceUnavailable("certapi is starting: "+err.Error()), s, schema.GroupVersion{}, w, r)
	})
}

// isHealthPath reports whether path is /healthz, /livez, /readyz or one of their single checks.
func isHealthPath(path string) bool {
	for _, p := range []string{"/healthz", "/livez", "/readyz"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}
