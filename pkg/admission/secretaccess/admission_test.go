package secretaccess

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/certapi/certapi/pkg/apis/certapi"
	"github.com/certapi/certapi/pkg/deliveryscope"
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
		// labels are the namespace's labels; nil: opted in (certapi.dev/secret-delivery=enabled).
		labels map[string]string
		// liveOnly: the namespace exists (with labels) but the cache has not seen it yet.
		liveOnly bool
		// cluster: --secret-delivery-scope=cluster.
		cluster bool
	}{
		// Secret delivery only in namespaces that opted in, refused before anyone is asked anything.
		{name: "create with secretName in a namespace that has not opted in", op: admission.Create, obj: scr("r-tls"), allowed: both,
			labels: map[string]string{"team": "a"}, asked: 0,
			wantErr: []string{`namespace "team" has not opted in to Secret delivery`, "kubectl label namespace team certapi.dev/secret-delivery=enabled",
				"kubectl create rolebinding certapi-secret-delivery -n team --clusterrole=certapi:secret-delivery --serviceaccount=certapi-system:certapi"}},
		{name: "create with secretName, the label with another value", op: admission.Create, obj: scr("r-tls"), allowed: both,
			labels: map[string]string{"certapi.dev/secret-delivery": "true"}, asked: 0, wantErr: []string{"has not opted in"}},
		{name: "set secretName in a namespace that has not opted in", op: admission.Update, old: scr(""), obj: scr("r-tls"), allowed: both,
			labels: map[string]string{}, asked: 0, wantErr: []string{"has not opted in"}},
		{name: "change the SANs with secretName set, the namespace no longer opted in", op: admission.Update,
			old: scr("r-tls"), obj: scr("r-tls", "extra.team.svc"), allowed: both, labels: map[string]string{}, asked: 0, wantErr: []string{"has not opted in"}},
		{name: "metadata-only update with secretName set, the namespace no longer opted in", op: admission.Update,
			old: scr("r-tls"), obj: func() *certapi.ServingCertRequest {
				r := scr("r-tls")
				r.Labels = map[string]string{"a": "b"}
				return r
			}(), labels: map[string]string{}, asked: 0},
		{name: "create without secretName in a namespace that has not opted in", op: admission.Create, obj: scr(""), labels: map[string]string{}, asked: 0},
		{name: "a namespace labelled a moment ago, not in the cache yet", op: admission.Create, obj: scr("r-tls"), allowed: both, liveOnly: true, asked: 3},
		{name: "a namespace not in the cache, not opted in", op: admission.Create, obj: scr("r-tls"), allowed: both, liveOnly: true,
			labels: map[string]string{}, asked: 0, wantErr: []string{"has not opted in"}},
		{name: "cluster scope: a namespace without the label", op: admission.Create, obj: scr("r-tls"), allowed: both, cluster: true,
			labels: map[string]string{}, asked: 3},
		{name: "cluster scope: still the requester's own Secret rights", op: admission.Create, obj: scr("r-tls"), allowed: updateOnly, cluster: true,
			labels: map[string]string{}, asked: 1, wantErr: []string{"may not create secrets"}},

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
			policy := deliveryscope.Policy{Scope: deliveryscope.LabelledNamespaces}
			policy.ServiceAccount.Namespace, policy.ServiceAccount.Name = "certapi-system", "certapi"
			if tt.cluster {
				policy.Scope = deliveryscope.Cluster
			}
			Initializer{Policy: policy}.Initialize(p)
			labels := tt.labels
			if labels == nil {
				labels = map[string]string{"certapi.dev/secret-delivery": "enabled"}
			}
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: labels}}
			client := fake.NewClientset()
			if !tt.liveOnly {
				client = fake.NewClientset(ns)
			}
			factory := informers.NewSharedInformerFactory(client, 0)
			p.SetExternalKubeInformerFactory(factory)
			p.SetExternalKubeClientSet(client)
			if err := p.ValidateInitialization(); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			factory.Start(stop)
			factory.WaitForCacheSync(stop)
			if tt.liveOnly {
				if _, err := client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
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
