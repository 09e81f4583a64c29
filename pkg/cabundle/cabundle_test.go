package cabundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/certapi/certapi/pkg/signer/signertest"
)

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// TestCanonical: comments, whitespace and duplicates go, order stays, and a bundle that does not parse
// is an error rather than a shorter bundle. The set digest ignores order; the digest does not.
func TestCanonical(t *testing.T) {
	a, b := signertest.Bundle(t, 1), signertest.Bundle(t, 1)
	ab, ba := cat(a, b), cat(b, a)
	for _, tt := range []struct {
		name    string
		in      []byte
		want    []byte
		wantErr bool
	}{
		{name: "already canonical", in: ab, want: ab},
		{name: "comments and blank lines", in: cat([]byte("# ours\n"), b, []byte("\n\n# theirs\n"), a, []byte("\n")), want: ba},
		{name: "duplicate", in: cat(a, b, a), want: ab},
		{name: "truncated", in: cat(a, b[:40]), wantErr: true},
		{name: "a damaged block", in: []byte("-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"), wantErr: true},
		{name: "not PEM", in: []byte("not PEM"), wantErr: true},
		{name: "empty", in: nil, wantErr: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Canonical(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Canonical error %v; want error %t", err, tt.wantErr)
			}
			if !bytes.Equal(got.PEM, tt.want) {
				t.Errorf("Canonical=\n%s\nwant\n%s", got.PEM, tt.want)
			}
			if tt.wantErr {
				return
			}
			want, _ := Canonical(tt.want)
			if got.Digest != want.Digest || got.Set != want.Set {
				t.Error("the digests differ from those of the canonical bytes")
			}
		})
	}
	cab, _ := Canonical(ab)
	cba, _ := Canonical(ba)
	if cab.Set != cba.Set || cab.Digest == cba.Digest {
		t.Error("the set digest must ignore order, and the digest must not")
	}
}

// TestSameCertificates: the summary counts a target holding the current CAs in another order (the
// switch made Next Active) as up to date, and one missing or adding a CA as not.
func TestSameCertificates(t *testing.T) {
	a, b, c := signertest.Bundle(t, 1), signertest.Bundle(t, 1), signertest.Bundle(t, 1)
	for _, tc := range []struct {
		name string
		x, y []byte
		want bool
	}{
		{"same order", cat(a, b), cat(a, b), true},
		{"reordered at the switch", cat(a, b), cat(b, a), true},
		{"a duplicate", cat(a, b, a), cat(b, a), true},
		{"one CA more", cat(a, b), cat(a, b, c), false},
		{"another CA", cat(a, b), cat(a, c), false},
		{"does not parse", []byte("nope"), cat(a), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameCertificates(tc.x, tc.y); got != tc.want {
				t.Errorf("SameCertificates = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestGuardedPatch: the resourceVersion test comes first, then the operations in order.
func TestGuardedPatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		rv   string
		ops  []Op
		want string
	}{
		{"no operation", "1", nil, `[{"op":"test","path":"/metadata/resourceVersion","value":"1"}]`},
		{"replace", "42", []Op{{Op: "replace", Path: "/spec/trustBundle", Value: "PEM"}},
			`[{"op":"test","path":"/metadata/resourceVersion","value":"42"},{"op":"replace","path":"/spec/trustBundle","value":"PEM"}]`},
		{"a remove has no value", "7", []Op{{Op: "add", Path: "/a", Value: "x"}, {Op: "remove", Path: "/b"}},
			`[{"op":"test","path":"/metadata/resourceVersion","value":"7"},{"op":"add","path":"/a","value":"x"},{"op":"remove","path":"/b"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := GuardedPatch(tc.rv, tc.ops...)
			if string(got) != tc.want {
				t.Errorf("GuardedPatch = %s\nwant %s", got, tc.want)
			}
			var ops []Op
			if err := json.Unmarshal(got, &ops); err != nil || len(ops) != len(tc.ops)+1 {
				t.Errorf("patch %s: %d operations, %v", got, len(ops), err)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	cm := schema.GroupResource{Resource: "configmaps"}
	tooLong := apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "big", field.ErrorList{field.TooLong(field.NewPath(""), "", 1048576)})
	// What kube-apiserver answers when a JSON patch does not apply (a failed resourceVersion test).
	testFailed := apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "",
		"the server rejected our request due to an error in our request", 0, false)
	for _, tc := range []struct {
		name string
		err  error
		want Failure
	}{
		{"422 Invalid with field causes: the object would be too long", tooLong, Refused},
		{"the same, wrapped", fmt.Errorf("writing: %w", tooLong), Refused},
		{"422 without causes: the resourceVersion test failed", testFailed, Stale},
		{"409 Conflict: a resourceVersion race", apierrors.NewConflict(cm, "c", errors.New("changed")), Stale},
		{"413 RequestEntityTooLarge", apierrors.NewRequestEntityTooLargeError("limit is 3145728"), Refused},
		{"400 BadRequest", apierrors.NewBadRequest("bad patch"), Refused},
		{"403 Forbidden by an admission policy", apierrors.NewForbidden(cm, "c", errors.New("ValidatingAdmissionPolicy 'p' denied request")), Refused},
		{"429 TooManyRequests", apierrors.NewTooManyRequests("slow down", 1), Transient},
		{"500 InternalError", apierrors.NewInternalError(errors.New("etcd")), Transient},
		{"503 ServiceUnavailable", apierrors.NewServiceUnavailable("later"), Transient},
		{"504 Timeout", apierrors.NewTimeoutError("slow", 1), Transient},
		{"404 NotFound", apierrors.NewNotFound(cm, "c"), Transient},
		{"not an API error: the network", errors.New("connection refused"), Transient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Classify(tc.err); got != tc.want {
				t.Errorf("Classify(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}
