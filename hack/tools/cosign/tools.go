//go:build tools

// Package cosign pins Sigstore's cosign, the ecosystem's own verifier of the release's signatures: test/release
// checks with it, offline and with the release's public key, the signatures and attestations of the image
// index (cosign verify, verify-attestation --local-image), the signature of checksums.txt (verify-blob) and
// the provenance of the release's files (verify-blob-attestation), and that a flipped byte fails each. It is a
// module of its own, like helm's and Prometheus's: cosign links the cloud KMS SDKs, TUF, Rekor's and
// Fulcio's clients, none of which certapi or kube-apiserver should be built with.
package cosign

import (
	_ "github.com/sigstore/cosign/v3/cmd/cosign"
)
