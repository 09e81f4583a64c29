// Command probe is the framework's test image for the node: an HTTP server on :8080 that answers, from
// inside its pod, what the pod sees of the cluster's network.
//
//	/healthz                 "ok"
//	/resolve?name=NAME       the addresses NAME resolves to, one a line (the pod's /etc/resolv.conf)
//	/get?url=URL             the status and body of a GET of URL (an http:// URL)
//	/get?url=URL&ca=FILE     the same for an https:// URL, trusting only the CA certificates in FILE (a
//	                         mounted clusterTrustBundle projection)
//
// With --tls-dir (tls.crt and tls.key, a mounted kubernetes.io/tls Secret) or --tls-bundle (one PEM file
// with the key and the chain, a podCertificate projection's credential bundle) it also serves HTTPS on
// --tls-port, reading the files again at every handshake, so that it always serves what kubelet last wrote
// there: /healthz answers "ok". No certificate there yet: the handshake fails.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	tlsDir := flag.String("tls-dir", "", "Directory of tls.crt and tls.key to serve HTTPS with; empty: no HTTPS.")
	tlsBundle := flag.String("tls-bundle", "", "PEM file of a key and its certificate chain to serve HTTPS with; empty: no HTTPS.")
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
		client := http.DefaultClient
		if caFile := r.URL.Query().Get("ca"); caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(pem) {
				http.Error(w, "no certificate in "+caFile, http.StatusBadGateway)
				return
			}
			client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
		} else if !strings.HasPrefix(u, "http://") {
			http.Error(w, "url must be http:// without ca", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		fmt.Fprintf(w, "%d\n%s", resp.StatusCode, body)
	})
	certFile, keyFile := *tlsBundle, *tlsBundle
	if *tlsDir != "" {
		certFile, keyFile = filepath.Join(*tlsDir, "tls.crt"), filepath.Join(*tlsDir, "tls.key")
	}
	if certFile != "" {
		// tls.X509KeyPair skips the blocks of the other kind, so a bundle serves as both files.
		cfg := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
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
