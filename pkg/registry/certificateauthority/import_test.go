package certificateauthority

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer"
)

type fakeImporter struct {
	res *issuer.ImportResult
	err error
	got []issuer.ImportRequest
}

func (f *fakeImporter) Import(_ context.Context, req issuer.ImportRequest) (*issuer.ImportResult, error) {
	f.got = append(f.got, req)
	return f.res, f.err
}

// TestImportAnswers: each outcome of an import is the API answer a client can act on.
func TestImportAnswers(t *testing.T) {
	refused := &signer.IntermediateError{Problems: []signer.Finding{
		{Reason: signer.ReasonKeyMismatch, Message: "not the key"}, {Reason: signer.ReasonNotCA, Message: "not a CA"}}}
	ok := &issuer.ImportResult{Role: issuer.RoleNext, SerialNumber: "ab", Warnings: []signer.Finding{{Reason: signer.ReasonPathLength, Message: "path length 1"}}}
	body := func(cert string) *certapi.CertificateAuthorityImport {
		return &certapi.CertificateAuthorityImport{Spec: certapi.CertificateAuthorityImportSpec{Certificate: cert}}
	}
	for _, tc := range []struct {
		name     string
		target   string
		in       *certapi.CertificateAuthorityImport
		res      *issuer.ImportResult
		err      error
		code     int32
		causes   []metav1.CauseType
		imported bool
	}{
		{name: "refused: 422 with every reason as a cause", target: "default", in: body("PEM"), err: refused, code: 422,
			causes: []metav1.CauseType{"KeyMismatch", "NotCA"}},
		{name: "empty certificate: 422 before the importer", target: "default", in: body(" "), code: 422, causes: []metav1.CauseType{"Malformed"}},
		{name: "too large: 422 before the importer", target: "default", in: body(string(make([]byte, signer.MaxImportBytes+1))), code: 422, causes: []metav1.CauseType{"Malformed"}},
		{name: "another name: 404", target: "other", in: body("PEM"), code: 404},
		{name: "nothing pending: 409", target: "default", in: body("PEM"), err: fmt.Errorf("x: %w", signer.ErrNoPendingRequest), code: 409},
		{name: "not an intermediate: 409", target: "default", in: body("PEM"), err: issuer.ErrUpstreamOff, code: 409},
		{name: "no leader: 503", target: "default", in: body("PEM"), err: fmt.Errorf("%w: late", issuer.ErrNoLeader), code: 503},
		{name: "imported", target: "default", in: body("PEM"), res: ok, imported: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeImporter{res: tc.res, err: tc.err}
			var imported bool
			r := NewImportREST(f, time.Second, func(*issuer.ImportResult) { imported = true })
			out, err := r.Create(context.Background(), tc.target, tc.in, nil, &metav1.CreateOptions{})
			if tc.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				st := out.(*certapi.CertificateAuthorityImport).Status
				if st.SerialNumber != "ab" || len(st.Warnings) != 1 || imported != tc.imported {
					t.Fatalf("status %+v, event %v", st, imported)
				}
				return
			}
			var se *apierrors.StatusError
			if !errors.As(err, &se) || se.ErrStatus.Code != tc.code {
				t.Fatalf("error %v; want code %d", err, tc.code)
			}
			var causes []metav1.CauseType
			if se.ErrStatus.Details != nil {
				for _, c := range se.ErrStatus.Details.Causes {
					causes = append(causes, c.Type)
				}
			}
			if fmt.Sprint(causes) != fmt.Sprint(tc.causes) && tc.causes != nil {
				t.Fatalf("causes %v; want %v", causes, tc.causes)
			}
			if imported {
				t.Fatal("an Event for an import that failed")
			}
			if tc.code == 503 && (se.ErrStatus.Details == nil || se.ErrStatus.Details.RetryAfterSeconds == 0) {
				t.Fatal("503 without Retry-After")
			}
		})
	}
}
