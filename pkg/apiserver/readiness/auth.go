// Package readiness holds certapi's own /readyz and /livez checks and health reports: delegated
// authentication and authorization (auth.go), the embedded etcd cluster's quorum (quorum.go) and the KMS
// plugins' health (kmshealth.go). Each file is one concern; the server adds them to its health checks.
package readiness

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// authConfigMap is where kube-apiserver publishes the CAs delegated authentication trusts.
const authConfigMap = "kube-system/extension-apiserver-authentication"

// authProbeTimeout bounds one readiness check's SubjectAccessReview; a probe that takes longer fails.
const authProbeTimeout = 2 * time.Second

// Auth holds the /readyz checks of delegated authentication and authorization: a replica whose
// client CA or request-header CA is not loaded yet would take kube-apiserver's aggregated requests, and any
// client certificate, for system:anonymous and refuse them (403), and one whose authorizer cannot reach
// kube-apiserver would refuse every request.
type Auth struct {
	// ClientCAExpected: a client CA comes from --client-ca-file or the ConfigMap.
	ClientCAExpected bool
	// RequestHeaderExpected: a request-header configuration comes from --requestheader-client-ca-file or the
	// ConfigMap.
	RequestHeaderExpected bool
	// RequestHeader is what the generic server built, nil when the lookup failed and was tolerated
	// (--authentication-tolerate-lookup-failure).
	RequestHeader *authenticatorfactory.RequestHeaderConfig
	// ClientCAs is the serving side's union of the client CA and the request-header CA, as the TLS
	// handshake and the authenticators see them now.
	ClientCAs dynamiccertificates.CAContentProvider
	// Authorizer is the generic server's; nil when authorization is off.
	Authorizer authorizer.Authorizer
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
func (a *Auth) state() authnState {
	s := authnState{ClientCAExpected: a.ClientCAExpected, RequestHeaderExpected: a.RequestHeaderExpected, RequestHeaderConfigured: a.RequestHeader != nil}
	all := 0
	if a.ClientCAs != nil {
		all = countCertificates(a.ClientCAs.CurrentCABundleContent())
	}
	if rh := a.RequestHeader; rh != nil {
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

// CheckAuthentication is a /readyz check: not ready until the client CA and the request-header CA are loaded.
func (a *Auth) CheckAuthentication(*http.Request) error {
	return authenticationNotReady(a.state())
}

// AuthenticationUsable is CheckAuthentication for every request: once it has passed, it costs an atomic load.
func (a *Auth) AuthenticationUsable() error {
	if a.authenticated.Load() {
		return nil
	}
	if err := authenticationNotReady(a.state()); err != nil {
		return err
	}
	a.authenticated.Store(true)
	return nil
}

// probeUser asks delegated authorization about a user nothing grants anything: any answer proves it works.
var probeUser = &user.DefaultInfo{Name: "system:certapi:readiness-probe"}

// CheckAuthorization is a /readyz check: not ready until delegated authorization has answered once (a
// SubjectAccessReview to kube-apiserver, allowed or not).
func (a *Auth) CheckAuthorization(r *http.Request) error {
	if a.Authorizer == nil || a.authorized.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), authProbeTimeout)
	defer cancel()
	_, _, err := a.Authorizer.Authorize(ctx, authorizer.AttributesRecord{
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
