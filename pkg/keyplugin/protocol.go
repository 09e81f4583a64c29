// Package keyplugin is the protocol between certapi and a key plugin: a process beside certapi that makes
// certapi's CA keys (ECDSA P-256) inside a device certapi cannot load itself (an HSM through PKCS#11,
// which needs cgo), signs digests with them there, and destroys them once no CA uses them. The private
// keys never leave the device; certapi keeps only a key's reference (the plugin's name for it, not
// secret) and its public key, which is in the CA's certificate.
//
// The protocol is JSON over HTTP/1.1 on a Unix socket, under versioned paths:
//
//	POST /v1/keys    {"label": L}                                  201 {"ref": R, "publicKey": <base64 DER PKIX>}
//	GET  /v1/keys?labelPrefix=P                                    200 {"keys": [{"ref": R, "label": L}, ...]}
//	POST /v1/sign    {"ref": R, "digest": <base64>, "hash": H}     200 {"signature": <base64 ASN.1 DER ECDSA>}
//	POST /v1/destroy {"ref": R}                                    204 (also when the key is already gone)
//	GET  /v1/health                                                200 when the device is usable, else 503
//
// H is "SHA-256" or "SHA-384", and the digest is that hash's length. Errors are {"error": "...",
// "reason": ...} with 400 (a bad request; the message says what is accepted), 404 (no such key, reason
// KeyNotFound; an unknown path is reason NotServed), 413 (a body over MaxBodyBytes) and 503 (the device
// cannot be used right now: try again later). The socket is the access control: the plugin makes it
// readable and writable by its own user only.
//
// The server side is NewHandler over a Backend, served by Serve; the client side, which certapi uses, is
// Client, whose keys are crypto.Signers (signer.ExternalKey). This package needs neither cgo nor a device.
package keyplugin

import (
	"crypto"
	"errors"
	"fmt"
)

// The protocol's paths, all under the version prefix /v1.
const (
	// PathKeys makes a key (POST) or lists keys by label prefix (GET).
	PathKeys = "/v1/keys"
	// PathSign signs a digest (POST).
	PathSign = "/v1/sign"
	// PathDestroy destroys a key (POST).
	PathDestroy = "/v1/destroy"
	// PathHealth says whether the device is usable (GET).
	PathHealth = "/v1/health"
)

// Limits of the protocol, checked by the handler and the client alike.
const (
	// MaxBodyBytes bounds every request and response body: a larger request is answered 413.
	MaxBodyBytes = 64 << 10
	// MaxLabelLength bounds a key's label, in bytes.
	MaxLabelLength = 128
	// MaxRefLength bounds a key's reference, in bytes.
	MaxRefLength = 512
)

// Reasons in ErrorResponse, which tell apart answers that share a status code.
const (
	// ReasonBadRequest: 400, the request is malformed or asks for what is not accepted.
	ReasonBadRequest = "BadRequest"
	// ReasonKeyNotFound: 404, the device holds no key by that reference.
	ReasonKeyNotFound = "KeyNotFound"
	// ReasonNotServed: 404 or 405, the plugin does not serve that path or method (an older plugin).
	ReasonNotServed = "NotServed"
	// ReasonTooLarge: 413, the request body is over MaxBodyBytes.
	ReasonTooLarge = "TooLarge"
	// ReasonUnavailable: 503, the device cannot be used right now; try again later.
	ReasonUnavailable = "Unavailable"
	// ReasonInternal: 500, anything else.
	ReasonInternal = "Internal"
)

// ErrNotFound is wrapped by a Backend's error for a reference that names no key in the device (the
// handler answers 404), and by a Client's error for such an answer.
var ErrNotFound = errors.New("no such key in the key plugin's device")

// ErrUnavailable is wrapped by a Backend's error when the device cannot be used right now: a session that
// cannot be opened, a token that is gone. The handler answers 503, which a Client turns into
// signer.ErrKeyUnavailable.
var ErrUnavailable = errors.New("the key plugin's device is unavailable")

// ErrInvalidRequest is wrapped by a Backend's error for a request it cannot accept, such as a reference
// it could not have made (the handler answers 400), and by a Client's error for such an answer.
var ErrInvalidRequest = errors.New("invalid key plugin request")

// NewKeyRequest is the body of POST /v1/keys.
type NewKeyRequest struct {
	// Label is the key's label in the device (1 to MaxLabelLength bytes of UTF-8, no control
	// characters). Labels need not be unique: the reference names the key.
	Label string `json:"label"`
}

// NewKeyResponse is the answer to POST /v1/keys.
type NewKeyResponse struct {
	// Ref names the new key to the plugin from now on.
	Ref string `json:"ref"`
	// PublicKey is the key's public half as DER PKIX (SubjectPublicKeyInfo), base64 in JSON.
	PublicKey []byte `json:"publicKey"`
}

// ListResponse is the answer to GET /v1/keys?labelPrefix=P.
type ListResponse struct {
	// Keys are the keys whose label starts with P, in no particular order.
	Keys []KeyInfo `json:"keys"`
}

// KeyInfo names one key in the device.
type KeyInfo struct {
	// Ref is the key's reference.
	Ref string `json:"ref"`
	// Label is the key's label.
	Label string `json:"label"`
}

// SignRequest is the body of POST /v1/sign.
type SignRequest struct {
	// Ref names the key.
	Ref string `json:"ref"`
	// Digest is the hash of the message, base64 in JSON; its length is Hash's.
	Digest []byte `json:"digest"`
	// Hash names the hash function that made Digest: "SHA-256" or "SHA-384".
	Hash string `json:"hash"`
}

// SignResponse is the answer to POST /v1/sign.
type SignResponse struct {
	// Signature is the ECDSA signature as ASN.1 DER (SEQUENCE of r and s), base64 in JSON.
	Signature []byte `json:"signature"`
}

// DestroyRequest is the body of POST /v1/destroy.
type DestroyRequest struct {
	// Ref names the key.
	Ref string `json:"ref"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	// Error says what went wrong, for a person; never key material, digests or signatures.
	Error string `json:"error"`
	// Reason is one of the Reason constants, for a program.
	Reason string `json:"reason"`
}

// hashes are the hash functions a digest may come from, by their protocol names.
var hashes = map[string]crypto.Hash{
	crypto.SHA256.String(): crypto.SHA256,
	crypto.SHA384.String(): crypto.SHA384,
}

// acceptedHashes names them, for errors.
const acceptedHashes = `"SHA-256" (a 32-byte digest) or "SHA-384" (a 48-byte digest)`

// HashName returns the protocol name of h ("SHA-256", "SHA-384"), or an error naming the accepted ones.
func HashName(h crypto.Hash) (string, error) {
	if h != crypto.SHA256 && h != crypto.SHA384 {
		return "", fmt.Errorf("%w: hash %v: the key plugin signs %s digests", ErrInvalidRequest, hashString(h), acceptedHashes)
	}
	return h.String(), nil
}

// ParseHash is the inverse of HashName.
func ParseHash(name string) (crypto.Hash, error) {
	h, ok := hashes[name]
	if !ok {
		return 0, fmt.Errorf("%w: hash %q: want %s", ErrInvalidRequest, name, acceptedHashes)
	}
	return h, nil
}

// checkDigest says whether digest has h's length.
func checkDigest(h crypto.Hash, digest []byte) error {
	if len(digest) != h.Size() {
		return fmt.Errorf("%w: a %s digest is %d bytes, got %d", ErrInvalidRequest, h, h.Size(), len(digest))
	}
	return nil
}

// hashString names h, and a zero h (crypto.Hash(0), no hashing) as "none".
func hashString(h crypto.Hash) string {
	if h == 0 {
		return "none"
	}
	return h.String()
}
