// Package filters holds certapi's HTTP filters: what its handler chain adds to the generic API server's.
// Each file is one filter; Chain puts them in their places around and inside the generic chain.
package filters

import (
	"net/http"

	genericapiserver "k8s.io/apiserver/pkg/server"
)

// Chain is the generic server's handler chain with certapi's additions, as a
// genericapiserver.Config.BuildHandlerChainFunc. Inside it, after authentication, authorization,
// priority and fairness and the request timeout, a servingcerts body is capped at 64 KiB: nothing of a
// request body is read before authorization; and while the embedded etcd cluster has no quorum, resource
// requests are answered 503 with Retry-After at once (retryWithoutQuorum). Around it, a body must arrive
// within the request timeout, and an unread one does not keep its connection (boundRequestBodies); and
// until delegated authentication is usable, requests are answered 503 rather than taken for anonymous
// (retryUntilAuthenticationUsable). Outermost, after SIGTERM every answer closes its connection
// (retireConnectionsOnShutdown). auth and quorum may be nil: their filters are then left out.
func Chain(auth AuthenticationGate, quorum QuorumSource) func(http.Handler, *genericapiserver.Config) http.Handler {
	return func(apiHandler http.Handler, c *genericapiserver.Config) http.Handler {
		h := genericapiserver.DefaultBuildHandlerChain(limitServingCertBodies(retryWithoutQuorum(apiHandler, quorum, c.Serializer)), c)
		h = boundRequestBodies(retryUntilAuthenticationUsable(h, auth, c.Serializer), c.RequestTimeout)
		return retireConnectionsOnShutdown(h, c.ShutdownInitiatedNotify())
	}
}
