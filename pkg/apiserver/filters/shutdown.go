package filters

import "net/http"

// retireConnectionsOnShutdown answers every HTTP/1.1 call that arrives after SIGTERM in full, and closes
// its connection after the answer ("Connection: close"). kube-apiserver's aggregator keeps a pool of
// connections to certapi's Service, each pinned to one replica; a connection the shutdown closes while it
// sits idle in that pool races the aggregator sending a call on it, and such a call fails with a 503 of
// the aggregator's own, which no client retries. Closing each connection after an answer cannot race:
// the aggregator reads the answer, sees the close and sends its next call on another connection, which
// the Service routes to a replica that stays. So the shutdown delay (--shutdown-delay-duration) is the
// time the pool has to leave this replica by itself before the remaining idle connections are closed.
//
// Over HTTP/2 (--disable-http2-serving=false) "Connection: close" means a GOAWAY, which fails the calls
// already sent on the connection, so it is left alone there.
func retireConnectionsOnShutdown(next http.Handler, shuttingDown <-chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 1 {
			select {
			case <-shuttingDown:
				w.Header().Set("Connection", "close")
			default:
			}
		}
		next.ServeHTTP(w, r)
	})
}
