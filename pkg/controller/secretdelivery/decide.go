package secretdelivery

import (
	"bytes"
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

// keyMarkerPrefix starts the value that stands for tls.key in the controller's Secret cache: the
// SHA-256 of the key's public half, never the key itself (see secretView).
const keyMarkerPrefix = "certapi-public-key-sha256:"

// action is what the controller does about one request's Secret.
type action int

const (
	// actionSkip: the request has no spec.secretName; nothing to deliver.
	actionSkip action = iota
	// actionNone: the Secret holds a current certificate; wait until its renewal time.
	actionNone
	// actionCreate: the Secret does not exist; create it.
	actionCreate
	// actionIssue: the Secret is certapi's (or handed over to it) and needs a new certificate.
	actionIssue
	// actionConflict: the Secret exists and certapi must not touch it.
	actionConflict
	// actionRecordUID: the Secret holds a current certificate but does not record the request's UID
	// (it was written before certapi recorded UIDs); record it, then wait until the renewal time.
	actionRecordUID
)

func (a action) String() string {
	switch a {
	case actionSkip:
		return "Skip"
	case actionNone:
		return "None"
	case actionCreate:
		return "Create"
	case actionIssue:
		return "Issue"
	case actionConflict:
		return "Conflict"
	case actionRecordUID:
		return "RecordUID"
	}
	return "action(" + strconv.Itoa(int(a)) + ")"
}

// decision is the outcome of decide.
type decision struct {
	Action action
	// Why says, for actionCreate and actionIssue, why a certificate is issued ("renewal due", "CA bundle
	// changed", ...), for logs and Events.
	Why string
	// Renewal is true when the Secret held a certificate certapi delivered before (the Event says
	// Renewed rather than Issued).
	Renewal bool
	// RenewAt is, for actionNone and actionRecordUID, when the certificate in the Secret is due for
	// renewal.
	RenewAt time.Time
	// Serial and NotAfter describe the current certificate, for actionNone and actionRecordUID.
	Serial   string
	NotAfter time.Time
	// Conflict is, for actionConflict, the message for the Ready condition and the Warning Event: which
	// Secret, why certapi leaves it alone, and how to fix it.
	Conflict string
}

// decideInput is everything decide looks at.
type decideInput struct {
	Request *certapiv1alpha1.ServingCertRequest
	// Secret is what is known of the Secret spec.secretName names (see secretView), nil when it does not
	// exist.
	Secret *secretView
	// CA is the certificate of the CA that signs now; Bundle is the PEM bundle clients must trust.
	CA     *x509.Certificate
	Bundle []byte
	// ClusterDomain gives the second SAN of every certificate.
	ClusterDomain string
	Now           time.Time
	// RecordedUIDExists is true when a ServingCertRequest with the UID the Secret records exists (and is
	// not Request): the Secret is that request's, and a conflict. When the Secret records another UID than
	// Request's and no request has it, the request it was delivered for no longer exists, and Request,
	// of the name the Secret is annotated with, adopts the Secret.
	RecordedUIDExists bool
}

// decide says what to do about one request's Secret. It is a pure function of its input so that every
// case can be tested without a cluster.
//
// A Secret is certapi's to write only when it is of type kubernetes.io/tls, mutable, annotated
// AnnotationServingCertRequest=<this request> and, if it records a request UID, this request's or that
// of a request that no longer exists (see ownership). Everything else that exists under spec.secretName
// is a conflict and is never written.
func decide(in decideInput) decision {
	req := in.Request
	name := req.Spec.SecretName
	if name == "" {
		return decision{Action: actionSkip}
	}
	s := in.Secret
	if s == nil {
		return decision{Action: actionCreate, Why: fmt.Sprintf("Secret %q does not exist", name)}
	}
	if conflict := ownership(req, s, in.RecordedUIDExists); conflict != "" {
		return decision{Action: actionConflict, Conflict: conflict}
	}

	// The Secret is this request's. From here on the answer is "issue" or "wait".
	delivered := s.Annotations[certapiv1alpha1.AnnotationSerialNumber] != ""
	held := delivered || s.HasCert
	issue := func(why string) decision {
		return decision{Action: actionIssue, Why: why, Renewal: delivered}
	}
	if uid := s.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID]; uid != "" && uid != string(req.UID) {
		// Delivered for an earlier request of this name, which no longer exists (deleted, or lost with
		// certapi's etcd data): this one adopts the Secret, and a certificate of its own records its UID.
		return issue(fmt.Sprintf("Secret %q was delivered to by an earlier ServingCertRequest %q with UID %s, which no longer exists: "+
			"this request (UID %s) adopts it", name, req.Name, uid, req.UID))
	}
	if !held {
		return issue(fmt.Sprintf("Secret %q was handed over to certapi and holds no certificate", name))
	}
	if s.Labels[certapiv1alpha1.LabelManaged] != "true" {
		return issue(fmt.Sprintf("Secret %q lacks the label %s=true", name, certapiv1alpha1.LabelManaged))
	}
	if gen := s.Annotations[certapiv1alpha1.AnnotationGeneration]; gen != strconv.FormatInt(req.Generation, 10) {
		return issue(fmt.Sprintf("the request's spec changed (generation %d; the certificate was issued for %q)", req.Generation, gen))
	}
	if asked := req.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt]; asked != "" && s.Annotations[certapiv1alpha1.AnnotationRenewRequestedAt] != asked {
		return issue(fmt.Sprintf("renewal was requested (annotation %s=%s)", certapiv1alpha1.AnnotationRenewRequestedAt, asked))
	}
	if s.BundleDigest != sha256.Sum256(in.Bundle) {
		return issue("the CA bundle changed")
	}
	cert := s.Cert
	if cert == nil {
		return issue(fmt.Sprintf("tls.crt is not usable: %s", s.CertError))
	}
	if in.CA != nil && !bytes.Equal(cert.AuthorityKeyID, in.CA.SubjectKeyId) {
		return issue("the signing CA changed")
	}
	if want := signer.SANs(req.Spec.ServiceName, req.Namespace, in.ClusterDomain, req.Spec.DNSNames); cert.TooManyNames || !sameNames(cert.DNSNames, want) {
		return issue(fmt.Sprintf("the certificate's names differ from the request's %v", want))
	}
	if s.KeyMarker != cert.PublicKeyMarker {
		return issue("tls.key is missing or does not belong to tls.crt")
	}
	serial := cert.SerialNumber
	if s.Annotations[certapiv1alpha1.AnnotationSerialNumber] != serial {
		return issue("the annotations do not describe the certificate in tls.crt")
	}
	renewAt, err := time.Parse(time.RFC3339, s.Annotations[certapiv1alpha1.AnnotationRenewalTime])
	if err != nil || renewAt.After(cert.NotAfter) {
		return issue(fmt.Sprintf("the annotation %s is missing or invalid", certapiv1alpha1.AnnotationRenewalTime))
	}
	if !in.Now.Before(renewAt) {
		return issue(fmt.Sprintf("renewal was due at %s", renewAt.UTC().Format(time.RFC3339)))
	}
	if s.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID] == "" {
		return decision{Action: actionRecordUID, Why: fmt.Sprintf("the Secret does not record the request's UID (annotation %s)", certapiv1alpha1.AnnotationServingCertRequestUID),
			RenewAt: renewAt, Serial: serial, NotAfter: cert.NotAfter}
	}
	return decision{Action: actionNone, RenewAt: renewAt, Serial: serial, NotAfter: cert.NotAfter}
}

// ownership says why the existing Secret s is not req's to write, or "" when it is: of type
// kubernetes.io/tls, mutable, annotated AnnotationServingCertRequest=<req's name>, and recording req's
// UID, none, or that of a request that no longer exists (recordedUIDExists false: a request of req's name
// deleted and created again, or lost with certapi's etcd data; names are unique in a namespace, so the
// live request of that name is req). The message names the Secret, why certapi leaves it alone, and the
// fix.
func ownership(req *certapiv1alpha1.ServingCertRequest, s *secretView, recordedUIDExists bool) string {
	name := s.Name
	owner := s.Annotations[certapiv1alpha1.AnnotationServingCertRequest]
	annotated := owner != "" // an empty value names no request
	uid := s.Annotations[certapiv1alpha1.AnnotationServingCertRequestUID]
	switch {
	case annotated && owner != req.Name:
		return fmt.Sprintf(
			"Secret %q is delivered to by ServingCertRequest %q (annotation %s=%s); two requests cannot share a Secret: "+
				"choose another spec.secretName, or annotate the Secret %s=%s to hand it over",
			name, owner, certapiv1alpha1.AnnotationServingCertRequest, owner, certapiv1alpha1.AnnotationServingCertRequest, req.Name)
	case annotated && uid != "" && uid != string(req.UID) && recordedUIDExists:
		return fmt.Sprintf(
			"Secret %q records the UID %s (annotation %s) of another ServingCertRequest, which exists, not this one's (UID %s): "+
				"two requests cannot share a Secret; choose another spec.secretName",
			name, uid, certapiv1alpha1.AnnotationServingCertRequestUID, req.UID)
	case s.Type != corev1.SecretTypeTLS:
		typ := string(s.Type)
		if typ == "" {
			typ = string(corev1.SecretTypeOpaque)
		}
		return fmt.Sprintf(
			"Secret %q has type %s and certapi delivers only into %s Secrets (the type cannot be changed); "+
				"delete it and certapi creates it, or choose another spec.secretName",
			name, typ, corev1.SecretTypeTLS)
	case !annotated:
		return fmt.Sprintf(
			"Secret %q exists and was not created by certapi; delete it, or annotate it %s=%s to hand it over",
			name, certapiv1alpha1.AnnotationServingCertRequest, req.Name)
	case s.Immutable:
		return fmt.Sprintf(
			"Secret %q is immutable and certapi must renew it in place; delete it and certapi creates it, "+
				"or choose another spec.secretName", name)
	}
	return ""
}

// MaxReportedSecrets bounds the Secrets a DistrustTally names (it counts them all).
const MaxReportedSecrets = 10

// DistrustTally is what a pending distrust learns from the labelled Secrets.
type DistrustTally struct {
	// Pending are the Secrets the distrust waits for: Secrets certapi delivers now, for an existing
	// request whose spec.secretName names them, whose certificate is not from the Active CA yet.
	Pending certapiv1alpha1.SecretsSummary
	// Unmanaged are the labelled Secrets certapi will not re-issue (no existing request names them, they
	// are in conflict, or they are not certapi's) that hold a certificate not from the Active CA. Never
	// waited for.
	Unmanaged certapiv1alpha1.SecretsSummary
}

// tallyDistrust sorts the labelled Secrets for a pending distrust: those certapi will re-issue and that
// still hold a certificate not from the CA with activeKeyID are Pending; those nobody will re-issue that
// hold one are Unmanaged; the rest (from the Active CA already, or holding no certificate) need nothing.
// request looks a request up by namespace and name (nil when there is none). A pure function of its
// input, like decide.
func tallyDistrust(secrets []*secretView, request func(namespace, name string) *certapiv1alpha1.ServingCertRequest, activeKeyID []byte) DistrustTally {
	var pending, unmanaged []string
	for _, s := range secrets {
		if !s.HasCert || (s.Cert != nil && bytes.Equal(s.Cert.AuthorityKeyID, activeKeyID)) {
			continue
		}
		if delivered(s, request) {
			pending = append(pending, s.Namespace+"/"+s.Name)
		} else if s.Cert != nil {
			unmanaged = append(unmanaged, s.Namespace+"/"+s.Name)
		}
	}
	return DistrustTally{Pending: summarize(pending), Unmanaged: summarize(unmanaged)}
}

// delivered reports whether certapi delivers into s now: an existing request, not being deleted, whose
// spec.secretName names s, and whose Secret s is to write (see ownership). A UID s records that is not
// req's belongs to no existing request: req is the one of that name.
func delivered(s *secretView, request func(namespace, name string) *certapiv1alpha1.ServingCertRequest) bool {
	owner := s.Annotations[certapiv1alpha1.AnnotationServingCertRequest]
	if owner == "" {
		return false
	}
	req := request(s.Namespace, owner)
	return req != nil && req.DeletionTimestamp == nil && req.Spec.SecretName == s.Name && ownership(req, s, false) == ""
}

// summarize counts names and keeps the first MaxReportedSecrets in lexical order.
func summarize(names []string) certapiv1alpha1.SecretsSummary {
	slices.Sort(names)
	sum := certapiv1alpha1.SecretsSummary{Count: int32(len(names))}
	if len(names) > 0 {
		sum.Names = slices.Clone(names[:min(len(names), MaxReportedSecrets)])
	}
	return sum
}

// parseLeaf parses the first certificate of a PEM tls.crt.
func parseLeaf(pemBytes []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing certificate: %w", err)
	}
	return cert, nil
}

// sameNames reports whether two lists hold the same DNS names, in any order.
func sameNames(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// publicKeyMarker is the marker for the private key that belongs to cert.
func publicKeyMarker(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return keyMarkerPrefix + hex.EncodeToString(sum[:])
}

// keyMarker turns a tls.key value into its marker: the SHA-256 of its public half. A value that is a
// marker already is returned as is; one that does not parse gives "".
func keyMarker(v []byte) string {
	if len(v) == 0 {
		return ""
	}
	if s := string(v); strings.HasPrefix(s, keyMarkerPrefix) {
		return s
	}
	pub, err := publicKeyOfPEM(v)
	if err != nil {
		return ""
	}
	spki, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(spki)
	return keyMarkerPrefix + hex.EncodeToString(sum[:])
}

// oidRSAEncryption identifies an RSA key in a PKCS#8 structure.
var oidRSAEncryption = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}

// publicKeyOfPEM returns the public half of a PEM private key. An RSA key's modulus and exponent are
// read straight from its ASN.1: crypto/x509 would also validate and precompute the key, which costs
// about 0.6 ms for RSA-4096 and would make a relist of many such Secrets slow. Other keys go through
// signer.ParseKeyPEM (about 20 µs for P-256).
func publicKeyOfPEM(v []byte) (crypto.PublicKey, error) {
	block, _ := pem.Decode(v)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	der := block.Bytes
	switch block.Type {
	case "PRIVATE KEY":
		var p8 struct {
			Version    int
			Algo       pkix.AlgorithmIdentifier
			PrivateKey []byte
		}
		if rest, err := asn1.Unmarshal(der, &p8); err != nil || len(rest) != 0 || !p8.Algo.Algorithm.Equal(oidRSAEncryption) {
			break
		}
		der = p8.PrivateKey
		fallthrough
	case "RSA PRIVATE KEY":
		// RSAPrivateKey ::= SEQUENCE { version, modulus, publicExponent, ... }
		var seq asn1.RawValue
		if rest, err := asn1.Unmarshal(der, &seq); err != nil || len(rest) != 0 || seq.Class != asn1.ClassUniversal || seq.Tag != asn1.TagSequence {
			return nil, errors.New("malformed RSA private key")
		}
		var (
			version int
			n       = new(big.Int)
			e       int
		)
		rest, err := asn1.Unmarshal(seq.Bytes, &version)
		if err == nil {
			rest, err = asn1.Unmarshal(rest, &n)
		}
		if err == nil {
			_, err = asn1.Unmarshal(rest, &e)
		}
		if err != nil || n.Sign() <= 0 {
			return nil, errors.New("malformed RSA private key")
		}
		return &rsa.PublicKey{N: n, E: e}, nil
	}
	key, err := signer.ParseKeyPEM(v)
	if err != nil {
		return nil, err
	}
	return key.Public(), nil
}

// namespaceAccess is what the Secret caches know of a namespace (secretCaches.access).
type namespaceAccess struct {
	// OptedIn: Secrets may be delivered into it (the cluster scope, or the namespace is labelled).
	OptedIn bool
	// Running: a Secret informer of its own runs (labelled-namespaces scope).
	Running bool
	// Synced: its Secrets are in the cache.
	Synced bool
	// Forbidden is kube-apiserver's refusal to list or watch its Secrets, "" when none.
	Forbidden string
}

// accessAction is what a request's sync does given its namespace's access.
type accessAction int

const (
	// accessDeliver: the namespace's Secrets are cached; decide and deliver.
	accessDeliver accessAction = iota
	// accessWait: the namespace's cache is starting; its sync enqueues the request again.
	accessWait
	// accessNotOptedIn: report the request Ready=False, reason NamespaceNotOptedIn, and wait for the
	// namespace to opt in (its label enqueues the request again).
	accessNotOptedIn
	// accessForbidden: report the request Ready=False, reason SecretAccessForbidden, and wait for the
	// cache to sync (a RoleBinding created later makes the informer's next retry succeed).
	accessForbidden
)

// decideAccess says what a request's sync does about its namespace. A refusal seen before the cache
// synced wins over waiting; once synced, the cache is used whatever refusal came before.
func decideAccess(a namespaceAccess) accessAction {
	switch {
	case !a.OptedIn:
		return accessNotOptedIn
	case a.Synced:
		return accessDeliver
	case a.Forbidden != "":
		return accessForbidden
	}
	return accessWait
}

// namespaceAction is what the namespace queue does about one namespace's Secret informer.
type namespaceAction int

const (
	namespaceKeep namespaceAction = iota
	namespaceStart
	namespaceStop
)

// decideNamespace says whether a namespace's Secret informer must start (it opted in and none runs),
// stop (it runs and the namespace no longer opts in, or is gone), or stay as it is.
func decideNamespace(optedIn, running bool) namespaceAction {
	switch {
	case optedIn && !running:
		return namespaceStart
	case !optedIn && running:
		return namespaceStop
	}
	return namespaceKeep
}
