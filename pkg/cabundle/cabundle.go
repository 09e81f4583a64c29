// Package cabundle is how the leader writes the CA bundle into objects that opted in (webhook
// configurations, CRDs, APIServices, ConfigMaps) and into its ClusterTrustBundle: the one canonical form
// of a bundle, the comparison of two bundles as sets of CAs, and the one guarded write, a JSON patch that
// applies only to the object version it was decided on, under field manager certapi.
//
// The injector and the trustbundle publisher both use it, so that every target holds the same bytes for
// the same CAs (each caBundle change on a CRD restarts its storage, so the bytes must be stable) and a
// write that lost a race is told apart from one kube-apiserver refused in the same way everywhere.
package cabundle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
)

// Bundle is a CA bundle in canonical form: parsed with signer.ParseBundle and re-encoded with
// signer.EncodeBundle, so that two bundles of the same certificates in the same order are the same bytes
// whatever their comments, whitespace or duplicates.
type Bundle struct {
	// PEM is the canonical bytes, as every target is written.
	PEM []byte
	// Digest is the SHA-256 of PEM.
	Digest [sha256.Size]byte
	// Set is the digest of the bundle's certificates as a set (their distinct DER, sorted): the same for
	// two bundles that differ only in order. When a rotation's Next CA becomes Active the bundle's order
	// changes and nothing else, and a target holding the previous order trusts exactly the same CAs.
	Set [sha256.Size]byte
}

// Canonical returns raw in canonical form. A bundle that does not parse is an error: writing it would
// break every client that reads it.
func Canonical(raw []byte) (Bundle, error) {
	certs, err := signer.ParseBundle(raw)
	if err != nil {
		return Bundle{}, err
	}
	pem := signer.EncodeBundle(certs...)
	return Bundle{PEM: pem, Digest: sha256.Sum256(pem), Set: setDigest(certs)}, nil
}

// SameCertificates reports whether two PEM bundles hold the same set of certificates, in any order and
// with any duplicates; false when either does not parse.
func SameCertificates(a, b []byte) bool {
	ca, err := Canonical(a)
	if err != nil {
		return false
	}
	cb, err := Canonical(b)
	return err == nil && ca.Set == cb.Set
}

// setDigest is the digest of certs as a set: their distinct DER encodings, sorted, each preceded by its
// length so that no two sets share an encoding.
func setDigest(certs []*x509.Certificate) [sha256.Size]byte {
	ders := make([][]byte, 0, len(certs))
	for _, c := range certs {
		ders = append(ders, c.Raw)
	}
	slices.SortFunc(ders, bytes.Compare)
	ders = slices.CompactFunc(ders, bytes.Equal)
	h := sha256.New()
	for _, d := range ders {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(d)))
		h.Write(n[:])
		h.Write(d)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// Op is one RFC 6902 (JSON patch) operation.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// GuardedPatch returns the JSON patch of ops preceded by a test of metadata.resourceVersion against
// resourceVersion: kube-apiserver applies it only to exactly the object version it was decided on (a
// webhook addressed by its index is the webhook that was looked at), and answers any other version with
// a 422 that Classify calls Stale. kube-apiserver does not retry a failed test itself.
func GuardedPatch(resourceVersion string, ops ...Op) []byte {
	all := append([]Op{{Op: "test", Path: "/metadata/resourceVersion", Value: resourceVersion}}, ops...)
	b, err := json.Marshal(all)
	if err != nil {
		// Values are strings, string slices and maps of them: this cannot happen.
		panic(fmt.Sprintf("cabundle: marshalling a JSON patch: %v", err))
	}
	return b
}

// Patcher is what Patch needs of a generated clientset's typed client for objects of type T.
type Patcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// Patch writes a JSON patch (made with GuardedPatch) to the object name through client, under field
// manager certapi, so that the fields it writes are recorded as certapi's (Argo CD's
// managedFieldsManagers keys on that).
func Patch[T any](ctx context.Context, client Patcher[T], name string, patch []byte) (T, error) {
	return client.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: certapiv1alpha1.FieldManager})
}

// Failure is how a failed guarded write is handled.
type Failure int

const (
	// Transient: the server could not answer now (429, 5xx, a timeout, the network): back off and retry.
	Transient Failure = iota
	// Stale: the object changed under the write (409, or a JSON patch that no longer applies, usually
	// its resourceVersion test): read it again and retry.
	Stale
	// Refused: kube-apiserver judged this write and refused it (422 with field errors, 413, 400, 403).
	// The same patch to the same object version gets the same answer, so retrying on a timer cannot
	// help.
	Refused
)

// Classify says how to handle err, returned by a guarded write.
//
// Validation (the object would be too large, a field would be invalid) and admission (a
// ValidatingAdmissionPolicy, RBAC) are functions of the object version, the patch and the cluster's
// policy: retrying the same bytes against the same version is refused again. A 422 without field causes
// is different: that is kube-apiserver failing to apply the JSON patch itself (its resourceVersion test,
// or a webhook index that moved), which a fresh read cures, so it is Stale.
func Classify(err error) Failure {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return Transient
	}
	switch {
	case apierrors.IsConflict(err):
		return Stale
	case apierrors.IsInvalid(err), status.Status().Code == http.StatusUnprocessableEntity:
		if d := status.Status().Details; d != nil && len(d.Causes) > 0 {
			return Refused
		}
		return Stale
	case apierrors.IsRequestEntityTooLargeError(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err):
		return Refused
	}
	return Transient
}
