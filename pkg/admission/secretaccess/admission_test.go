package secretaccess

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/certapi/certapi/pkg/apis/certapi"
)

// fakeAuthorizer allows the "<verb> <name>" pairs in allowed (name empty for a create) and records
// every question.
type fakeAuthorizer struct {
	allowed map[string]bool
	asked   []string
}

func (f *fakeAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	q := a.GetVerb() + " " + a.GetResource() + "/" + a.GetName()
	f.asked = append(f.asked, q)
	if a.GetNamespace() != "team" || a.GetAPIGroup() != "" {
		return authorizer.DecisionDeny, "wrong namespace or group", nil
	}
	if f.allowed[q] {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no RBAC rule", nil
}

func scr(secretName string, dnsNames ...string) *certapi.ServingCertRequest {
	return &certapi.ServingCertRequest{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "r"},
		Spec:       certapi.ServingCertRequestSpec{ServiceName: "svc", SecretName: secretName, DNSNames: dnsNames},
	}
}

func TestValidate(t *testing.T) {
	both := map[string]bool{"create secrets/": true, "update secrets/r-tls": true}
	namespaceWide := map[string]bool{"create secrets/": true, "update secrets/": true}
	createOnly := map[string]bool{"create secrets/": true}
	updateOnly := map[string]bool{"update secrets/r-tls": true}
	tests := []struct {
		name     string
		op       admission.Operation
		old, obj *certapi.ServingCertRequest
		allowed  map[string]bool
		wantErr  []string // substrings of the 403; none: admitted
		asked    int      // authorization questions
	}{
		{name: "create without secretName", op: admission.Create, obj: scr(""), asked: 0},
		// Update is asked for every Secret of the namespace first (one cached answer for all requests),
		// then for the Secret by name.
		{name: "create with secretName, may create and update that Secret", op: admission.Create, obj: scr("r-tls"), allowed: both, asked: 3},
		{name: "create with secretName, may create and update every Secret", op: admission.Create, obj: scr("r-tls"), allowed: namespaceWide, asked: 2},
		{name: "create with secretName, may not create", op: admission.Create, obj: scr("r-tls"), allowed: updateOnly,
			wantErr: []string{`may not create secrets in namespace "team"`, "setting secretName asks certapi to write it", "no RBAC rule"}, asked: 1},
		{name: "create with secretName, may create but not update", op: admission.Create, obj: scr("r-tls"), allowed: createOnly,
			wantErr: []string{"may not update secrets", `Secret "r-tls"`}, asked: 3},
		{name: "set secretName, may not update it", op: admission.Update, old: scr(""), obj: scr("r-tls"), allowed: createOnly,
			wantErr: []string{"may not update secrets"}, asked: 3},
		{name: "change secretName", op: admission.Update, old: scr("old-tls"), obj: scr("r-tls"), allowed: both, asked: 3},
		{name: "change the SANs with secretName set, may not update the Secret", op: admission.Update,
			old: scr("r-tls"), obj: scr("r-tls", "extra.team.svc"), allowed: createOnly,
			wantErr: []string{"may not update secrets", "a change of the spec makes certapi re-issue the certificate in it"}, asked: 3},
		{name: "change the duration with secretName set, may create and update it", op: admission.Update,
			old: scr("r-tls"), obj: func() *certapi.ServingCertRequest {
				r := scr("r-tls")
				r.Spec.Duration = &metav1.Duration{Duration: 1e12}
				return r
			}(), allowed: both, asked: 3},
		{name: "metadata-only update with secretName set asks nothing", op: admission.Update,
			old: scr("r-tls"), obj: func() *certapi.ServingCertRequest {
				r := scr("r-tls")
				r.Labels = map[string]string{"a": "b"}
				return r
			}(), asked: 0},
		{name: "unset secretName asks nothing", op: admission.Update, old: scr("r-tls"), obj: scr(""), asked: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			authz := &fakeAuthorizer{allowed: tt.allowed}
			p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
			p.SetAuthorizer(authorizer.AuthorizerFunc(authz.Authorize))
			var old runtime.Object
			if tt.old != nil {
				old = tt.old
			}
			attrs := admission.NewAttributesRecord(tt.obj, old, certapi.Kind("ServingCertRequest").WithVersion(""), "team", "r",
				certapi.Resource("servingcertrequests").WithVersion(""), "", tt.op, nil, false, &user.DefaultInfo{Name: "alice"})
			err := p.Validate(context.Background(), attrs, nil)
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("admitted; want a 403 (asked %v)", authz.asked)
				}
				if !strings.Contains(err.Error(), "forbidden") {
					t.Errorf("error %q is not a 403", err)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
			}
			if len(authz.asked) != tt.asked {
				t.Errorf("asked %v; want %d questions", authz.asked, tt.asked)
			}
		})
	}
}
