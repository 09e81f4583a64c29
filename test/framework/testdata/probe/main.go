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
// there: /healthz answers "ok". No certificate there yet: the handshake fails. Which Secret is mounted there
// (one certapi delivers, one of a CA of the test's own, one issued for another Service) decides what the
// pod serves.
//
// It is also a validating admission webhook for kube-apiserver to call, on either port:
//
//	/validate                an admission.k8s.io/v1 AdmissionReview (POST); the response allows the request
//	/callers                 the source addresses of the /validate calls so far, one a line, in the order
//	                         first seen: where kube-apiserver connects from
//	/readyz                  "ok", or 503 with --unready (a readiness probe that never passes)
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
)

func main() {
	tlsDir := flag.String("tls-dir", "", "Directory of tls.crt and tls.key to serve HTTPS with; empty: no HTTPS.")
	tlsBundle := flag.String("tls-bundle", "", "PEM file of a key and its certificate chain to serve HTTPS with; empty: no HTTPS.")
	tlsPort := flag.Int("tls-port", 8443, "Port of the HTTPS server.")
	unready := flag.Bool("unready", false, "Answer /readyz with 503, so that a readiness probe on it never passes.")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if *unready {
			http.Error(w, "not ready (--unready)", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	var callers webhookCallers
	mux.HandleFunc("/validate", callers.validate)
	mux.HandleFunc("/callers", func(w http.ResponseWriter, _ *http.Request) {
		for _, c := range callers.list() {
			fmt.Fprintln(w, c)
		}
	})
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

// webhookCallers answers admission reviews and remembers where they came from.
type webhookCallers struct {
	mu    sync.Mutex
	hosts []string
}

// validate answers an admission.k8s.io/v1 AdmissionReview with one that allows the request, and records the
// caller's address. Anything else is a 400 that says what is accepted.
func (c *webhookCallers) validate(w http.ResponseWriter, r *http.Request) {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		c.mu.Lock()
		if !slices.Contains(c.hosts, host) {
			c.hosts = append(c.hosts, host)
		}
		c.mu.Unlock()
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(io.LimitReader(r.Body, 3<<20)).Decode(&review); err != nil {
		http.Error(w, "decoding the AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return
	}
	if review.APIVersion != admissionv1.SchemeGroupVersion.String() || review.Kind != "AdmissionReview" || review.Request == nil {
		http.Error(w, fmt.Sprintf("got apiVersion %q kind %q (request set: %v); want an admission.k8s.io/v1 AdmissionReview with a request",
			review.APIVersion, review.Kind, review.Request != nil), http.StatusBadRequest)
		return
	}
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// list returns the callers' addresses, in the order first seen.
func (c *webhookCallers) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.hosts)
}
