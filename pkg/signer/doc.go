// Package signer holds certapi's certificate authority and signing code:
// key generation and PEM encoding, creating and loading the in-cluster CA,
// signing TLS serving certificates for Services, checking PKCS#10 requests
// from the servingcerts subresource, computing renewal times and encoding
// CA bundles.
//
// It is pure Go and standard-library crypto, with no Kubernetes client, so
// that the rules every certificate must follow (see "ServingCertRequest" and
// "CA lifecycle" in DESIGN.md) live in one small place that is easy to test
// and to audit:
//
//   - A CA is an ECDSA P-256 self-signed certificate whose critical X.509 name
//     constraints permit only DNS names under "svc" and "svc.<clusterDomain>"
//     and exclude every IP address, so that even a mistaken signature cannot
//     be used for another name by a verifier that enforces name constraints
//     (Go's crypto/x509, and so kube-apiserver, does).
//   - A leaf's identity comes only from a [LeafRequest] (service, namespace,
//     cluster domain, extra names already validated by the API layer), never
//     from the subject or SANs of a certificate request.
//   - A leaf never outlives its CA, is backdated a few minutes for clock skew,
//     and carries only the serverAuth extended key usage.
//   - The CA may instead be an intermediate of an organisation's root:
//     IntermediateRequest writes the certificate request (the same
//     constraints, asked for), CheckIntermediate checks what the upstream
//     really signed and returns a CA that carries its chain (CA.Chain), leaves
//     are served with the intermediates, and BundleAnchor says whether
//     bundles carry the root or certapi's intermediate. The CA key is used
//     only through crypto.Signer, so it may live in a hardware module.
//
// Errors returned to API callers are short, say what was wrong and what is
// accepted, and never contain key material or the full input.
package signer
