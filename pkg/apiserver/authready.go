package apiserver

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// authConfigMap is where kube-apiserver publishes the CAs delegated authentication trusts.
const authConfigMap = "kube-system/extension-apiserver-authentication"

// authProbeTimeout bounds one readiness check's SubjectAccessReview; a probe that takes longer fails.
const authProbeTimeout = 2 * time.Second

// authReadiness holds the /readyz checks of delegated authentication and authorization: a replica whose
// client CA or request-header CA is not loaded yet would take kube-apiserver's aggregated requests, and any
// client certificate, for system:anonymous and refuse them (403), and one whose authorizer cannot reach
// kube-apiserver would refuse every request.
type authReadiness struct {
	// clientCAExpected: a client CA comes from --client-ca-file or the ConfigMap.
	clientCAExpected bool
	// requestHeaderExpected: a request-header configuration comes from --requestheader-client-ca-file or the
	// ConfigMap; requestHeader is what the generic server built, nil when the lookup failed and was
	// tolerated (--authentication-tolerate-lookup-failure).
	requestHeaderExpected bool
	requestHeader         *authenticatorfactory.RequestHeaderConfig
	// clientCAs is the serving side's union of the client CA and the request-header CA, as the TLS
	// handshake and the authenticators see them now.
	clientCAs dynamiccertificates.CAContentProvider
	// authorizer is the generic server's; nil when authorization is off.
	authorizer authorizer.Authorizer
	// authorized latches once delegated authorization has answered: certapi makes no periodic call to
	// stay ready.
	authorized atomic.Bool
	// authenticated latches once both CAs were loaded: a loaded bundle is never emptied again (a bad
	// update of the ConfigMap leaves the last good one in place).
	authenticated atomic.Bool
}

// authnState is what the delegated authenticator holds, for authenticationNotReady.
type authnState struct {
	ClientCAExpected, RequestHeaderExpected bool
	// RequestHeaderConfigured is false when the generic server has no request-header configuration.
	RequestHeaderConfigured bool
	// RequestHeaderCAs and ClientCAs count the certificates loaded in each bundle now.
	RequestHeaderCAs, ClientCAs int
	// UsernameHeaders counts the headers the request-header authenticator reads the user name from.
	UsernameHeaders int
}

// authenticationNotReady says what keeps delegated authentication from being usable, or nil.
func authenticationNotReady(s authnState) error {
	var missing []string
	if s.RequestHeaderExpected {
		switch {
		case !s.RequestHeaderConfigured:
			missing = append(missing, "no request-header configuration: looking up "+authConfigMap+" failed at start and was tolerated "+
				"(--authentication-tolerate-lookup-failure); every request kube-apiserver forwards would be anonymous. Restart certapi once it may read that ConfigMap")
		case s.RequestHeaderCAs == 0:
			missing = append(missing, "the request-header CA (requestheader-client-ca-file of "+authConfigMap+") is not loaded yet")
		case s.UsernameHeaders == 0:
			missing = append(missing, "no request-header username headers (requestheader-username-headers of "+authConfigMap+") are loaded yet")
		}
	}
	if s.ClientCAExpected && s.ClientCAs == 0 {
		missing = append(missing, "the client CA (client-ca-file of "+authConfigMap+", or --client-ca-file) is not loaded yet; "+
			"a kube-apiserver without --client-ca-file publishes none: give certapi --client-ca-file, or --authentication-skip-lookup with the --requestheader-* flags")
	}
	if len(missing) == 0 {
		return nil
	}
	return errors.New("delegated authentication is not usable yet: " + strings.Join(missing, "; "))
}

// state reads what the authenticator holds now.
func (a *authReadiness) state() authnState {
	s := authnState{ClientCAExpected: a.clientCAExpected, RequestHeaderExpected: a.requestHeaderExpected, RequestHeaderConfigured: a.requestHeader != nil}
	all := 0
	if a.clientCAs != nil {
		all = countCertificates(a.clientCAs.CurrentCABundleContent())
	}
	if rh := a.requestHeader; rh != nil {
		if rh.CAContentProvider != nil {
			s.RequestHeaderCAs = countCertificates(rh.CAContentProvider.CurrentCABundleContent())
		}
		if rh.UsernameHeaders != nil {
			s.UsernameHeaders = len(rh.UsernameHeaders.Value())
		}
	}
	// The serving side trusts the union of both bundles; what is not the request-header CA's is the client CA's.
	s.ClientCAs = max(all-s.RequestHeaderCAs, 0)
	return s
}

// checkAuthentication is a /readyz check: not ready until the client CA and the request-header CA are loaded.
func (a *authReadiness) checkAuthentication(*http.Request) error {
	return authenticationNotReady(a.state())
}

// authenticationUsable is checkAuthentication for every request: once it has passed, it costs an atomic load.
func (a *authReadiness) authenticationUsable() error {
	if a.authenticated.Load() {
		return nil
	}
	if err := authenticationNotReady(a.state()); err != nil {
		return err
	}
	a.authenticated.Store(true)
	return nil
}

// retryUntilAuthenticationUsable answers 503 with Retry-After: 1 while delegated authentication is not
// usable, instead of letting the request through to be taken for system:anonymous and refused (403). The
// generic server serves as soon as it listens, and the CAs of the ConfigMap load a moment later, when its
// informer has synced: a Service sends nothing to a replica until /readyz passes, but kube-apiserver
// reaching certapi some other way (an ExternalName, a proxy) would meet that moment. client-go retries the
// 503. Health checks pass through, so that /readyz can say why.
func retryUntilAuthenticationUsable(next http.Handler, a *authReadiness, s runtime.NegotiatedSerializer) http.Handler {
	if a == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := a.authenticationUsable()
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

// probeUser asks delegated authorization about a user nothing grants anything: any answer proves it works.
var probeUser = &user.DefaultInfo{Name: "system:certapi:readiness-probe"}

// checkAuthorization is a /readyz check: not ready until delegated authorization has answered once (a
// SubjectAccessReview to kube-apiserver, allowed or not).
func (a *authReadiness) checkAuthorization(r *http.Request) error {
	if a.authorizer == nil || a.authorized.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), authProbeTimeout)
	defer cancel()
	_, _, err := a.authorizer.Authorize(ctx, authorizer.AttributesRecord{
		User: probeUser, Verb: "get", Path: "/certapi-readiness-probe", ResourceRequest: false,
	})
	if err != nil {
		return fmt.Errorf("delegated authorization is not usable yet: a SubjectAccessReview to kube-apiserver failed: %w", err)
	}
	a.authorized.Store(true)
	return nil
}

// countCertificates counts the PEM certificate blocks of a bundle.
func countCertificates(bundle []byte) int {
	n := 0
	for {
		var block *pem.Block
		block, bundle = pem.Decode(bundle)
		if block == nil {
			return n
		}
		if block.Type == "CERTIFICATE" {
			n++
		}
	}
}
