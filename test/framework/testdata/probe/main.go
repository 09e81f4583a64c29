// Command probe is the framework's test image for the node: an HTTP server on :8080 that answers, from
// inside its pod, what the pod sees of the cluster's network.
//
//	/healthz                 "ok"
//	/resolve?name=NAME       the addresses NAME resolves to, one a line (the pod's /etc/resolv.conf)
//	/get?url=URL             the status and body of a GET of URL (an http:// URL only)
//
// With --tls-dir it also serves HTTPS on --tls-port with tls.crt and tls.key of that directory (a mounted
// kubernetes.io/tls Secret), read again at every handshake, so that it always serves what kubelet last wrote
// there: /healthz answers "ok". No certificate there yet: the handshake fails.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	tlsDir := flag.String("tls-dir", "", "Directory of tls.crt and tls.key to serve HTTPS with; empty: no HTTPS.")
	tlsPort := flag.Int("tls-port", 8443, "Port of the HTTPS server.")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/resolve", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, r.URL.Query().Get("name"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		fmt.Fprintln(w, strings.Join(addrs, "\n"))
	})
	mux.HandleFunc("/get", func(w http.ResponseWriter, r *http.Request) {
		u := r.URL.Query().Get("url")
		if !strings.HasPrefix(u, "http://") {
			http.Error(w, "url must be http://", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		fmt.Fprintf(w, "%d\n%s", resp.StatusCode, body)
	})
	if *tlsDir != "" {
		cfg := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(filepath.Join(*tlsDir, "tls.crt"), filepath.Join(*tlsDir, "tls.key"))
			if err != nil {
				return nil, err
			}
			return &c, nil
		}}
		srv := &http.Server{Addr: fmt.Sprintf(":%d", *tlsPort), Handler: mux, TLSConfig: cfg, ReadHeaderTimeout: 10 * time.Second}
		go func() { log.Fatal(srv.ListenAndServeTLS("", "")) }()
	}
	srv := &http.Server{Addr: ":8080", Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
