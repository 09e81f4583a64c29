package keyplugin

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Backend is the device behind the handler. Its errors wrap ErrNotFound, ErrUnavailable or
// ErrInvalidRequest when they mean that, and never carry key material, digests or signatures: the handler
// sends them to the client as they are.
type Backend interface {
	// NewKey makes a new ECDSA P-256 key labelled label in the device and returns its reference and
	// public key (an *ecdsa.PublicKey). The private key must not be able to leave the device.
	NewKey(ctx context.Context, label string) (ref string, pub crypto.PublicKey, err error)
	// Sign signs digest, made by hash, with the key ref names and returns the ASN.1 DER signature.
	Sign(ctx context.Context, ref string, digest []byte, hash crypto.Hash) ([]byte, error)
	// Destroy destroys the key ref names, or returns ErrNotFound when there is none.
	Destroy(ctx context.Context, ref string) error
	// List returns the keys whose label starts with labelPrefix (every key for "").
	List(ctx context.Context, labelPrefix string) ([]KeyInfo, error)
	// Check returns nil when the device is logged in and usable.
	Check(ctx context.Context) error
}

// NewHandler serves the protocol (see the package documentation) over b.
func NewHandler(b Backend) http.Handler {
	return &handler{b: b}
}

type handler struct {
	b Backend
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	type route struct {
		method string
		serve  func(http.ResponseWriter, *http.Request) error
	}
	var routes []route
	switch r.URL.Path {
	case PathKeys:
		routes = []route{{http.MethodPost, h.newKey}, {http.MethodGet, h.list}}
	case PathSign:
		routes = []route{{http.MethodPost, h.sign}}
	case PathDestroy:
		routes = []route{{http.MethodPost, h.destroy}}
	case PathHealth:
		routes = []route{{http.MethodGet, h.health}}
	default:
		writeError(w, http.StatusNotFound, ReasonNotServed, fmt.Sprintf("the key plugin serves no %s; it serves %s, %s, %s and %s", r.URL.Path, PathKeys, PathSign, PathDestroy, PathHealth))
		return
	}
	var allowed []string
	for _, rt := range routes {
		if rt.method == r.Method {
			if err := rt.serve(w, r); err != nil {
				writeBackendError(w, err)
			}
			return
		}
		allowed = append(allowed, rt.method)
	}
	w.Header().Set("Allow", strings.Join(allowed, ", "))
	writeError(w, http.StatusMethodNotAllowed, ReasonNotServed, fmt.Sprintf("%s takes %s, not %s", r.URL.Path, strings.Join(allowed, " or "), r.Method))
}

func (h *handler) newKey(w http.ResponseWriter, r *http.Request) error {
	var req NewKeyRequest
	if !readRequest(w, r, &req) {
		return nil
	}
	if err := checkLabel(req.Label); err != nil {
		return err
	}
	ref, pub, err := h.b.NewKey(r.Context(), req.Label)
	if err != nil {
		return fmt.Errorf("making key %q: %w", req.Label, err)
	}
	if err := checkRef(ref); err != nil {
		return fmt.Errorf("the device made key %q with an unusable reference: %v", req.Label, err)
	}
	ecPub, ok := pub.(*ecdsa.PublicKey)
	if !ok || ecPub.Curve != elliptic.P256() {
		return fmt.Errorf("the device made key %q (%s) with a public key of type %T, want ECDSA P-256", req.Label, ref, pub)
	}
	der, err := x509.MarshalPKIXPublicKey(ecPub)
	if err != nil {
		return fmt.Errorf("encoding the public key of %s: %v", ref, err)
	}
	writeJSON(w, http.StatusCreated, NewKeyResponse{Ref: ref, PublicKey: der})
	return nil
}

func (h *handler) list(w http.ResponseWriter, r *http.Request) error {
	prefix := r.URL.Query().Get("labelPrefix")
	if len(prefix) > MaxLabelLength {
		return fmt.Errorf("%w: labelPrefix of %d bytes: at most %d", ErrInvalidRequest, len(prefix), MaxLabelLength)
	}
	keys, err := h.b.List(r.Context(), prefix)
	if err != nil {
		return fmt.Errorf("listing keys labelled %q...: %w", prefix, err)
	}
	if keys == nil {
		keys = []KeyInfo{}
	}
	writeJSON(w, http.StatusOK, ListResponse{Keys: keys})
	return nil
}

func (h *handler) sign(w http.ResponseWriter, r *http.Request) error {
	var req SignRequest
	if !readRequest(w, r, &req) {
		return nil
	}
	if err := checkRef(req.Ref); err != nil {
		return err
	}
	hash, err := ParseHash(req.Hash)
	if err != nil {
		return err
	}
	if err := checkDigest(hash, req.Digest); err != nil {
		return err
	}
	sig, err := h.b.Sign(r.Context(), req.Ref, req.Digest, hash)
	if err != nil {
		return fmt.Errorf("signing with %s: %w", req.Ref, err)
	}
	writeJSON(w, http.StatusOK, SignResponse{Signature: sig})
	return nil
}

func (h *handler) destroy(w http.ResponseWriter, r *http.Request) error {
	var req DestroyRequest
	if !readRequest(w, r, &req) {
		return nil
	}
	if err := checkRef(req.Ref); err != nil {
		return err
	}
	// A key that is already gone is destroyed: a retried Destroy whose first answer was lost succeeds.
	if err := h.b.Destroy(r.Context(), req.Ref); err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("destroying %s: %w", req.Ref, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (h *handler) health(w http.ResponseWriter, r *http.Request) error {
	if err := h.b.Check(r.Context()); err != nil {
		writeError(w, http.StatusServiceUnavailable, ReasonUnavailable, err.Error())
		return nil
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	return nil
}

// readRequest decodes r's JSON body into v, refusing a body over MaxBodyBytes, unknown fields and
// trailing data. When it fails it has answered, and returns false.
func readRequest(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, ReasonTooLarge, fmt.Sprintf("the request body is over %d bytes", MaxBodyBytes))
			return false
		}
		writeError(w, http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("reading the request body: %v", err))
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("the request body is not a %T in JSON: %v", v, err))
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, ReasonBadRequest, "the request body has data after its JSON object")
		return false
	}
	return true
}

// checkLabel accepts 1 to MaxLabelLength bytes of UTF-8 without control characters.
func checkLabel(label string) error {
	switch {
	case label == "":
		return fmt.Errorf("%w: the label is empty", ErrInvalidRequest)
	case len(label) > MaxLabelLength:
		return fmt.Errorf("%w: a label of %d bytes: at most %d", ErrInvalidRequest, len(label), MaxLabelLength)
	case !utf8.ValidString(label):
		return fmt.Errorf("%w: the label is not UTF-8", ErrInvalidRequest)
	case strings.IndexFunc(label, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: the label %q has a control character", ErrInvalidRequest, label)
	}
	return nil
}

// checkRef accepts 1 to MaxRefLength bytes of printable ASCII.
func checkRef(ref string) error {
	switch {
	case ref == "":
		return fmt.Errorf("%w: the key reference is empty", ErrInvalidRequest)
	case len(ref) > MaxRefLength:
		return fmt.Errorf("%w: a key reference of %d bytes: at most %d", ErrInvalidRequest, len(ref), MaxRefLength)
	case strings.IndexFunc(ref, func(c rune) bool { return c < 0x21 || c > 0x7e }) >= 0:
		return fmt.Errorf("%w: the key reference %q is not printable ASCII without spaces", ErrInvalidRequest, ref)
	}
	return nil
}

// writeBackendError answers err with the status its sentinel means: 400, 404, 503, or 500 for anything
// else. A request whose context ended (the client gave up, the server shuts down) is 503 as well.
func writeBackendError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrInvalidRequest):
		writeError(w, http.StatusBadRequest, ReasonBadRequest, err.Error())
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, ReasonKeyNotFound, err.Error())
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, ReasonUnavailable, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, ReasonInternal, err.Error())
	}
}

func writeError(w http.ResponseWriter, status int, reason, msg string) {
	writeJSON(w, status, ErrorResponse{Error: msg, Reason: reason})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil { // only the types above, which always marshal
		status, body = http.StatusInternalServerError, []byte(`{"error":"encoding the answer failed","reason":"Internal"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
