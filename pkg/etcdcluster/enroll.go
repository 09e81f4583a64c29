package etcdcluster

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/certapi/certapi/pkg/signer"
)

// EnrollPath is where a member that holds the peer CA's key answers enrollment requests.
const EnrollPath = "/certapi.dev/etcd/enroll"

// Identity is the member that a joining process proved to be.
type Identity struct {
	// Name is the member's name, its pod's name (<statefulset>-<ordinal>).
	Name string
	// IPs are its pod's addresses: its certificate holds them, since members reach each other by address
	// (DNSDiscovery).
	IPs []string
}

// IdentityVerifier establishes which member presents a proof. In a cluster the proof is a projected
// ServiceAccount token of the member's pod, audience-bound to certapi's members, which
// incluster.PodTokenVerifier checks with a TokenReview and against the pod it is bound to. Whatever it
// returns is signed into a member certificate, so it must not trust anything the caller says of itself.
type IdentityVerifier interface {
	Verify(ctx context.Context, proof string) (Identity, error)
}

// ErrNotEnrolled means the member asked refused to enroll this one; trying another member does not help.
var ErrNotEnrolled = errors.New("enrollment refused")

// maxEnrollBody bounds an enrollment request: a token and a CSR of a P-256 key fit in a few KiB.
const maxEnrollBody = 64 << 10

// enrollRequest is a joining member's request: its proof of identity and a CSR of the key it made, whose
// subject's common name is the member name it claims.
type enrollRequest struct {
	Proof string `json:"proof"`
	CSR   []byte `json:"csr"`
}

// enrollResponse is the member certificate, followed by the CA's chain.
type enrollResponse struct {
	Certificate []byte `json:"certificate"`
}

// enrollmentURL is the enrollment endpoint of the member whose client URL is clientURL: the same host,
// on the port of this member's ListenEnrollURL (every member listens on the same ports).
func (m *Member) enrollmentURL(clientURL string) (string, error) {
	if m.cfg.EnrollmentURL != nil {
		return m.cfg.EnrollmentURL(clientURL), nil
	}
	c, err := url.Parse(clientURL)
	if err != nil {
		return "", fmt.Errorf("client URL %q: %w", clientURL, err)
	}
	l, err := url.Parse(m.cfg.ListenEnrollURL)
	if err != nil {
		return "", fmt.Errorf("listen enroll URL %q: %w", m.cfg.ListenEnrollURL, err)
	}
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(c.Hostname(), l.Port()), Path: EnrollPath}).String(), nil
}

// enroll asks the members at clientURLs, in turn, for a member certificate: it makes a key, sends its
// proof of identity and a CSR, and checks that the certificate it gets back is for that key and this
// member's name and chains to trust. The server is authenticated with trust, so the proof (a token) goes
// only to a member of this cluster.
func (m *Member) enroll(ctx context.Context, clientURLs []string, trust []byte, now time.Time) (*MemberCertificate, error) {
	if m.cfg.Proof == nil {
		return nil, errors.New("this member holds no peer CA key and has no proof of identity to enroll with")
	}
	key, err := signer.GenerateKey(signer.ECDSAP256)
	if err != nil {
		return nil, fmt.Errorf("making the member key: %w", err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{Subject: pkix.Name{CommonName: m.cfg.Name}}, key)
	if err != nil {
		return nil, fmt.Errorf("making the member CSR: %w", err)
	}
	proof, err := m.cfg.Proof()
	if err != nil {
		return nil, fmt.Errorf("reading this member's proof of identity: %w", err)
	}
	body, err := json.Marshal(enrollRequest{Proof: proof, CSR: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})})
	if err != nil {
		return nil, fmt.Errorf("encoding the enrollment request: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(trust) {
		return nil, errors.New("the peer CA bundle holds no certificate to verify members with")
	}
	var errs []error
	for _, cu := range clientURLs {
		if cu == m.cfg.ClientURL {
			continue
		}
		target, err := m.enrollmentURL(cu)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		asked := time.Now()
		resp, err := postEnroll(ctx, target, roots, body)
		if err != nil {
			if errors.Is(err, ErrNotEnrolled) {
				return nil, err
			}
			errs = append(errs, err)
			continue
		}
		mc, err := acceptEnrollment(resp, key, m.cfg.Name, roots, now)
		if err != nil {
			return nil, fmt.Errorf("the member at %s answered with %w", target, err)
		}
		klog.FromContext(ctx).Info("Enrolled with the etcd cluster: a member issued this member's certificate", "through", target,
			"notAfter", mc.NotAfter, "took", time.Since(asked).Round(time.Millisecond))
		return mc, nil
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("%w: no other member to enroll with", errWait)
	}
	return nil, fmt.Errorf("%w: no member enrolled this one: %w", errWait, errors.Join(errs...))
}

// postEnroll sends body to target, verifying the server against roots.
func postEnroll(ctx context.Context, target string, roots *x509.CertPool, body []byte) (*enrollResponse, error) {
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("asking %s: %w", target, err)
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxEnrollBody))
	if err != nil {
		return nil, fmt.Errorf("reading the answer of %s: %w", target, err)
	}
	switch {
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusBadRequest:
		return nil, fmt.Errorf("%w by %s: %s", ErrNotEnrolled, target, strings.TrimSpace(string(data)))
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s answered %s: %s", target, resp.Status, strings.TrimSpace(string(data)))
	}
	var out enrollResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("decoding the answer of %s: %w", target, err)
	}
	return &out, nil
}

// acceptEnrollment checks an enrollment answer: a certificate for key's public key, named name, that
// chains to roots, and turns it into this member's certificate.
func acceptEnrollment(resp *enrollResponse, key crypto.Signer, name string, roots *x509.CertPool, now time.Time) (*MemberCertificate, error) {
	certs, err := signer.ParseBundle(resp.Certificate)
	if err != nil || len(certs) == 0 {
		return nil, fmt.Errorf("no member certificate: %v", err)
	}
	leaf := certs[0]
	pub, ok := leaf.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(key.Public()) {
		return nil, errors.New("a certificate for another key")
	}
	if leaf.Subject.CommonName != name {
		return nil, fmt.Errorf("a certificate for %q, not this member", leaf.Subject.CommonName)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		return nil, fmt.Errorf("a certificate the peer CA bundle does not verify: %w", err)
	}
	keyPEM, err := signer.EncodeKeyPEM(key)
	if err != nil {
		return nil, err
	}
	return newMemberCertificate(leaf, resp.Certificate, keyPEM, now), nil
}

// newMemberCertificate is the MemberCertificate of leaf, renewed when two thirds of its life from now
// have passed.
func newMemberCertificate(leaf *x509.Certificate, certPEM, keyPEM []byte, now time.Time) *MemberCertificate {
	life := leaf.NotAfter.Sub(now)
	return &MemberCertificate{CertPEM: certPEM, KeyPEM: keyPEM, NotAfter: leaf.NotAfter, RenewAt: now.Add(life * 2 / 3)}
}

// enrollmentHandler answers enrollment requests with a member certificate for the identity the proof
// establishes, never for what the request says of itself beyond the name, which must match.
func (m *Member) enrollmentHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+EnrollPath, func(w http.ResponseWriter, r *http.Request) {
		var req enrollRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxEnrollBody)).Decode(&req); err != nil {
			http.Error(w, "expected a JSON body {\"proof\": <token>, \"csr\": <PEM CSR>}: "+err.Error(), http.StatusBadRequest)
			return
		}
		mc, status, err := m.answerEnrollment(r.Context(), req, time.Now())
		if err != nil {
			klog.FromContext(r.Context()).Info("Refused to enroll an etcd member", "from", r.RemoteAddr, "status", status, "reason", err.Error())
			http.Error(w, err.Error(), status)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(enrollResponse{Certificate: mc.CertPEM})
	})
	return mux
}

// answerEnrollment checks req and issues the member certificate; on failure it returns the HTTP status
// to answer with and an error that says why (never the proof itself).
func (m *Member) answerEnrollment(ctx context.Context, req enrollRequest, now time.Time) (*MemberCertificate, int, error) {
	block, _ := pem.Decode(req.CSR)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, http.StatusBadRequest, errors.New("csr: expected one PEM block of type CERTIFICATE REQUEST")
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("csr: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("csr: its signature does not verify: %w", err)
	}
	if _, ok := csr.PublicKey.(*ecdsa.PublicKey); !ok {
		return nil, http.StatusBadRequest, errors.New("csr: expected an ECDSA P-256 public key")
	}
	if req.Proof == "" {
		return nil, http.StatusForbidden, errors.New("no proof of identity")
	}
	id, err := m.cfg.Verifier.Verify(ctx, req.Proof)
	if err != nil {
		return nil, http.StatusForbidden, fmt.Errorf("the proof of identity was not accepted: %w", err)
	}
	if csr.Subject.CommonName != id.Name {
		return nil, http.StatusForbidden, fmt.Errorf("the CSR names member %q, the proof of identity %q", csr.Subject.CommonName, id.Name)
	}
	ca := m.PeerCA().CA
	if ca.Key == nil {
		return nil, http.StatusServiceUnavailable, errors.New("this member does not hold the peer CA's key yet; ask another")
	}
	mc, err := ca.issueMember(id.Name, m.enrolleeHosts(id), csr.PublicKey, nil, now, m.cfg.MemberCertDuration)
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	klog.FromContext(ctx).Info("Enrolled an etcd member: its proof of identity was accepted and its certificate issued", "enrolled", id.Name, "notAfter", mc.NotAfter)
	return mc, http.StatusOK, nil
}

// enrolleeHosts are the names and addresses a member certificate for id holds: its pod's addresses, and
// this member's own DNS names with this member's name in the first label replaced by id's
// (<pod>.<headless service>...: every member is named the same way).
func (m *Member) enrolleeHosts(id Identity) []string {
	hosts := append([]string{}, id.IPs...)
	for _, u := range []string{m.cfg.PeerURL, m.cfg.ClientURL} {
		p, err := url.Parse(u)
		if err != nil || net.ParseIP(p.Hostname()) != nil {
			continue
		}
		if first, rest, ok := strings.Cut(p.Hostname(), "."); ok && first == m.cfg.Name {
			hosts = append(hosts, id.Name+"."+rest)
		}
	}
	return hosts
}

// serveEnrollment answers enrollment requests on ListenEnrollURL until ctx ends, presenting this
// member's current certificate.
func (m *Member) serveEnrollment(ctx context.Context) error {
	u, err := url.Parse(m.cfg.ListenEnrollURL)
	if err != nil {
		return fmt.Errorf("listen enroll URL: %w", err)
	}
	lis, err := net.Listen("tcp", u.Host)
	if err != nil {
		return fmt.Errorf("listening for enrollments on %s: %w", u.Host, err)
	}
	srv := &http.Server{
		Handler: m.enrollmentHandler(),
		// Requests carry Run's logger (not its end: Close ends them).
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			mc := m.creds.cert.Load()
			c, err := tls.X509KeyPair(mc.CertPEM, mc.KeyPEM)
			return &c, err
		}},
	}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	if err := srv.ServeTLS(lis, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving enrollments: %w", err)
	}
	return nil
}
