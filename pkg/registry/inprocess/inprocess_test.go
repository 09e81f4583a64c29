package inprocess

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/apis/certapi/install"
	"github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// storage is a status storage of one stored object: Update applies the UpdatedObjectInfo to it, as the
// generic registry does, and records what it would write.
type storage struct {
	stored  runtime.Object
	written runtime.Object
}

func (s *storage) Update(ctx context.Context, _ string, objInfo rest.UpdatedObjectInfo, _ rest.ValidateObjectFunc,
	_ rest.ValidateObjectUpdateFunc, _ bool, _ *metav1.UpdateOptions) (runtime.Object, bool, error) {
	obj, err := objInfo.UpdatedObject(ctx, s.stored)
	if err != nil {
		return nil, false, err
	}
	s.written = obj
	return obj, false, nil
}

// TestUpdateStatus: mutate sees the stored object in its versioned form; its change comes back in the
// internal form, the stored object untouched; no change gives an equal copy; a stored object of another
// type is an error that names the kind.
func TestUpdateStatus(t *testing.T) {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	stored := func() *certapi.ServingCertRequest {
		return &certapi.ServingCertRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", ResourceVersion: "7"},
			Spec: certapi.ServingCertRequestSpec{ServiceName: "web"}}
	}
	for _, tc := range []struct {
		name       string
		stored     runtime.Object
		mutate     func(*v1alpha1.ServingCertRequest) bool
		wantReason string
		wantErr    bool
	}{
		{name: "a change is written", stored: stored(), wantReason: "Issued", mutate: func(r *v1alpha1.ServingCertRequest) bool {
			if r.Spec.ServiceName != "web" || r.ResourceVersion != "7" {
				t.Errorf("mutate saw %+v; want the stored object", r)
			}
			r.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Issued"}}
			return true
		}},
		{name: "no change: an equal copy", stored: stored(), mutate: func(*v1alpha1.ServingCertRequest) bool { return false }},
		{name: "another type", stored: &certapi.CertificateAuthority{}, wantErr: true, mutate: func(*v1alpha1.ServingCertRequest) bool { return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &storage{stored: tc.stored}
			err := UpdateStatus[certapi.ServingCertRequest, v1alpha1.ServingCertRequest](context.Background(), s, scheme, "ServingCertRequest", "web", tc.mutate)
			if tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), "not a ServingCertRequest") {
					t.Fatalf("error %v; want one that names the kind", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, ok := s.written.(*certapi.ServingCertRequest)
			if !ok {
				t.Fatalf("wrote a %T", s.written)
			}
			if got == tc.stored {
				t.Fatal("the stored object itself was returned; it may be the watch cache's")
			}
			if len(tc.stored.(*certapi.ServingCertRequest).Status.Conditions) != 0 {
				t.Error("the stored object was changed")
			}
			reason := ""
			if len(got.Status.Conditions) > 0 {
				reason = got.Status.Conditions[0].Reason
			}
			if reason != tc.wantReason || got.Spec.ServiceName != "web" {
				t.Errorf("wrote %+v; want reason %q and the stored spec", got, tc.wantReason)
			}
		})
	}
}
