package chart

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// csrPolicy is the admission policy that bounds certapi's CertificateSigningRequest writes.
const csrPolicy = release + "-certificatesigningrequests"

// TestCertificateSigningRequestPolicy: the chart grants certapi CertificateSigningRequests, and installs the
// admission policy that bounds what it writes with them, only with caUpstream.certificateSigningRequests;
// the policy allows the one signer caUpstream.signerName or extraArgs' --ca-upstream-signer-name names, and
// the rendering applies with a server-side dry run (kube-apiserver compiles the policy's CEL). Values that
// would leave the policy refusing certapi's own requests, or allowing one of Kubernetes' signers, are
// refused.
func TestCertificateSigningRequestPolicy(t *testing.T) {
	const on = "caUpstream.certificateSigningRequests=true"
	flags := func(signer string) string {
		return `extraArgs=["--ca-upstream=CertificateSigningRequest","--ca-upstream-signer-name=` + signer + `","--ca-upstream-roots=/etc/certapi/org-roots/roots.pem"]`
	}
	for _, tc := range []struct {
		name string
		args []string
		// signer is the signerName the policy allows; "": no policy and no CertificateSigningRequest grant.
		signer string
	}{
		{name: "default"},
		{name: "caUpstream.signerName", args: []string{"--set", on, "--set", "caUpstream.signerName=example.com/org-ca"}, signer: "example.com/org-ca"},
		{name: "the flag in extraArgs", args: []string{"--set", on, "--set-json", flags("clusterissuers.cert-manager.io/org-intermediate")},
			signer: "clusterissuers.cert-manager.io/org-intermediate"},
		{name: "both alike", args: []string{"--set", on, "--set", "caUpstream.signerName=issuers.cert-manager.io/pki.org-ca", "--set-json", flags("issuers.cert-manager.io/pki.org-ca")},
			signer: "issuers.cert-manager.io/pki.org-ca"},
		{name: "the grant without the flag yet", args: []string{"--set", on, "--set", "caUpstream.signerName=example.com/org-ca", "--set-json", `extraArgs=["--v=2"]`},
			signer: "example.com/org-ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := "certapi-csr-" + strings.ToLower(strings.NewReplacer(" ", "-", ".", "", ",", "").Replace(tc.name))
			objs, out := render(t, ns, tc.args...)
			policy, binding := find(objs, "ValidatingAdmissionPolicy", csrPolicy), find(objs, "ValidatingAdmissionPolicyBinding", csrPolicy)
			var role rbacv1.ClusterRole
			convert(t, find(objs, "ClusterRole", release), &role)
			if tc.signer == "" {
				if policy != nil || binding != nil {
					t.Errorf("%s rendered (policy %v, binding %v) without caUpstream.certificateSigningRequests", csrPolicy, policy != nil, binding != nil)
				}
				if rbacAllows(role.Rules, "certificates.k8s.io", "certificatesigningrequests", "create") {
					t.Error("certapi may create CertificateSigningRequests without caUpstream.certificateSigningRequests")
				}
				return
			}
			if policy == nil || binding == nil {
				t.Fatalf("%s rendered: policy %v, binding %v; want both", csrPolicy, policy != nil, binding != nil)
			}
			var p admissionregistrationv1.ValidatingAdmissionPolicy
			convert(t, policy, &p)
			var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
			convert(t, binding, &b)
			if b.Spec.PolicyName != csrPolicy || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) || b.Spec.ParamRef != nil {
				t.Errorf("binding %s: %+v; want policy %s, Deny, no param", b.Name, b.Spec, csrPolicy)
			}
			if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
				t.Errorf("policy %s: failurePolicy %v; want Fail", p.Name, p.Spec.FailurePolicy)
			}
			if users := policyUsers(t, []*unstructured.Unstructured{policy}); !slices.Equal(users, []string{"system:serviceaccount:" + ns + ":" + release}) {
				t.Errorf("policy %s is about %v; want certapi's ServiceAccount", p.Name, users)
			}
			signer := ""
			for _, v := range p.Spec.Variables {
				if v.Name == "signerName" {
					signer = v.Expression
				}
			}
			if signer != "'"+tc.signer+"'" {
				t.Errorf("policy %s allows the signer %s; want '%s'", p.Name, signer, tc.signer)
			}
			// Every kind of write to a request, its status and its approval goes through the policy.
			rule := p.Spec.MatchConstraints.ResourceRules[0]
			for _, r := range []string{"certificatesigningrequests", "certificatesigningrequests/status", "certificatesigningrequests/approval"} {
				if !slices.Contains(rule.Resources, r) {
					t.Errorf("policy %s does not match %s", p.Name, r)
				}
			}
			for _, op := range []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete} {
				if !slices.Contains(rule.Operations, op) {
					t.Errorf("policy %s does not match %s", p.Name, op)
				}
			}
			// The grant: what certapi does, and no update, patch or approval.
			for _, verb := range []string{"create", "get", "list", "watch", "delete"} {
				if !rbacAllows(role.Rules, "certificates.k8s.io", "certificatesigningrequests", verb) {
					t.Errorf("certapi may not %s CertificateSigningRequests", verb)
				}
			}
			for _, r := range []string{"certificatesigningrequests", "certificatesigningrequests/status", "certificatesigningrequests/approval"} {
				for _, verb := range []string{"update", "patch", "deletecollection"} {
					if rbacAllows(role.Rules, "certificates.k8s.io", r, verb) {
						t.Errorf("certapi may %s %s", verb, r)
					}
				}
			}
			if rbacAllows(role.Rules, "certificates.k8s.io", "signers", "approve") {
				t.Error("certapi may approve requests of a signer")
			}
			dryRun(t, ns, "restricted", out, objs)
		})
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", on}, "caUpstream.certificateSigningRequests needs the signerName certapi asks"},
		{[]string{"--set", on, "--set", "caUpstream.signerName=kubernetes.io/kube-apiserver-client"}, "one of Kubernetes' own signers"},
		{[]string{"--set", on, "--set-json", flags("kubernetes.io/legacy-unknown")}, "one of Kubernetes' own signers"},
		{[]string{"--set", on, "--set", "caUpstream.signerName=example.com/a", "--set-json", flags("example.com/b")}, `caUpstream.signerName "example.com/a" and --ca-upstream-signer-name=example.com/b in extraArgs differ`},
		{[]string{"--set", on, "--set", "caUpstream.signerName=example.com/a", "--set-json", `extraArgs=["--ca-upstream=CertificateSigningRequest"]`},
			"add --ca-upstream-signer-name=example.com/a"},
		// The signer is written into a CEL string: nothing but a signerName gets there.
		{[]string{"--set", on, "--set", "caUpstream.signerName=example.com/a' || true || 'b"}, "at '/caUpstream/signerName'"},
		{[]string{"--set", on, "--set-json", flags("example.com/a' || true || 'b")}, "want a domain, a slash and a name"},
		{[]string{"--set-json", `extraArgs=["--ca-upstream=CertificateSigningRequest","--ca-upstream-signer-name=example.com/a"]`}, "set caUpstream.certificateSigningRequests=true too"},
	} {
		r := runHelm(t, append([]string{"template", release, chartDir, "--namespace", "certapi"}, tc.args...)...)
		if r.err == nil || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("helm template %v: %v, stderr %q; want a failure saying %q", tc.args, r.err, r.stderr, tc.want)
		}
	}
}
