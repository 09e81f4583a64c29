package upstreamcsr

import (
	"slices"
	"strings"
	"testing"
)

func TestDecide(t *testing.T) {
	const signerName = "issuers.cert-manager.io/pki.org-ca"
	pending := &pendingView{name: "certapi-ca-0011", request: []byte("REQUEST\n")}
	mine := func(change func(*csrView)) csrView {
		v := csrView{name: "certapi-ca-0011", resourceVersion: "7", request: []byte("REQUEST"), signerName: signerName}
		if change != nil {
			change(&v)
		}
		return v
	}
	stale := csrView{name: "certapi-ca-old", resourceVersion: "3", request: []byte("OLD"), signerName: signerName}
	for _, tc := range []struct {
		name    string
		pending *pendingView
		csrs    []csrView
		refused map[string]string

		create     bool
		remove     []string
		importFrom string
		state      string
		detail     string
	}{
		{name: "nothing pending, nothing made"},
		{name: "nothing pending: an unsigned request of an earlier key is deleted, a signed one kept as a record",
			csrs:   []csrView{stale, {name: "certapi-ca-signed", certificate: []byte("CERT"), signerName: signerName}},
			remove: []string{"certapi-ca-old"}},
		{name: "nothing pending: a denied one of an earlier key stays for the cleaner",
			csrs: []csrView{{name: "certapi-ca-old", denied: true, signerName: signerName}}},
		{name: "pending, none made: make it", pending: pending, create: true, state: stateCreating, detail: "making CertificateSigningRequest certapi-ca-0011 for signer " + signerName},
		{name: "pending, with a stale one: make it and delete the stale one", pending: pending, csrs: []csrView{stale},
			create: true, remove: []string{"certapi-ca-old"}, state: stateCreating},
		{name: "made, not approved", pending: pending, csrs: []csrView{mine(nil)}, state: statePending,
			detail: "waits for approval (kubectl certificate approve certapi-ca-0011), then for signer " + signerName},
		{name: "approved, not signed", pending: pending, csrs: []csrView{mine(func(v *csrView) { v.approved = true })}, state: stateApproved,
			detail: "is approved and waits for signer"},
		{name: "issued: import", pending: pending, csrs: []csrView{mine(func(v *csrView) { v.approved, v.certificate = true, []byte("CERT") })},
			importFrom: "certapi-ca-0011", state: stateIssued},
		{name: "issued, refused at this resourceVersion: not again", pending: pending,
			csrs:    []csrView{mine(func(v *csrView) { v.approved, v.certificate = true, []byte("CERT") })},
			refused: map[string]string{"certapi-ca-0011": "7"}, state: stateRefused, detail: "was refused"},
		{name: "issued again after a refusal (a new resourceVersion): import", pending: pending,
			csrs:    []csrView{mine(func(v *csrView) { v.approved, v.certificate, v.resourceVersion = true, []byte("CERT2"), "9" })},
			refused: map[string]string{"certapi-ca-0011": "7"}, importFrom: "certapi-ca-0011", state: stateIssued},
		{name: "denied: reported, neither deleted nor made again", pending: pending,
			csrs:  []csrView{mine(func(v *csrView) { v.denied, v.reason, v.message = true, "PolicyDenied", "not today" })},
			state: stateDenied, detail: "was denied (PolicyDenied: not today); delete it for certapi to ask again"},
		{name: "failed: reported", pending: pending,
			csrs: []csrView{mine(func(v *csrView) {
				v.approved, v.failed, v.reason, v.message = true, true, "SigningError", "issuer not ready"
			})},
			state: stateFailed, detail: "failed CertificateSigningRequest certapi-ca-0011 (SigningError: issuer not ready)"},
		{name: "being deleted: wait for it to go", pending: pending, csrs: []csrView{mine(func(v *csrView) { v.deleting = true })}, state: stateDeleting},
		{name: "for another signer (certapi restarted with another): deleted, made again once gone", pending: pending,
			csrs:   []csrView{mine(func(v *csrView) { v.signerName = "example.com/old" })},
			remove: []string{"certapi-ca-0011"}, state: stateDeleting, detail: "asks signer example.com/old for another request"},
		{name: "another request under the name: deleted", pending: pending,
			csrs:   []csrView{mine(func(v *csrView) { v.request = []byte("OTHER") })},
			remove: []string{"certapi-ca-0011"}, state: stateDeleting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.pending, signerName, tc.csrs, tc.refused)
			if d.create != tc.create || d.importFrom != tc.importFrom || d.state != tc.state || !slices.Equal(d.remove, tc.remove) {
				t.Errorf("decide: create %v, remove %v, import %q, state %q; want create %v, remove %v, import %q, state %q",
					d.create, d.remove, d.importFrom, d.state, tc.create, tc.remove, tc.importFrom, tc.state)
			}
			if !strings.Contains(d.detail, tc.detail) {
				t.Errorf("detail %q; want it to contain %q", d.detail, tc.detail)
			}
		})
	}
}
