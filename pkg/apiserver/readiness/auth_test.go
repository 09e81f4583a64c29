package readiness

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	certutil "k8s.io/client-go/util/cert"
)

func TestAuthenticationNotReady(t *testing.T) {
	ready := authnState{ClientCAExpected: true, RequestHeaderExpected: true, RequestHeaderConfigured: true, RequestHeaderCAs: 1, ClientCAs: 1, UsernameHeaders: 1}
	cases := []struct {
		name   string
		change func(*authnState)
		want   []string // substrings of the error; none: ready
	}{
		{name: "both CAs and the headers loaded", change: func(*authnState) {}},
		{name: "client CA not loaded", change: func(s *authnState) { s.ClientCAs = 0 }, want: []string{"client CA", "client-ca-file of kube-system/extension-apiserver-authentication"}},
		{name: "request-header CA not loaded", change: func(s *authnState) { s.RequestHeaderCAs = 0 }, want: []string{"request-header CA", "requestheader-client-ca-file"}},
		{name: "no username headers", change: func(s *authnState) { s.UsernameHeaders = 0 }, want: []string{"requestheader-username-headers"}},
		{name: "lookup failed and was tolerated", change: func(s *authnState) { s.RequestHeaderConfigured, s.RequestHeaderCAs, s.UsernameHeaders = false, 0, 0 },
			want: []string{"no request-header configuration", "--authentication-tolerate-lookup-failure", "Restart certapi"}},
		{name: "nothing loaded: both said", change: func(s *authnState) { s.ClientCAs, s.RequestHeaderCAs = 0, 0 }, want: []string{"client CA", "request-header CA"}},
		{name: "lookup skipped: nothing expected", change: func(s *authnState) {
			*s = authnState{}
		}},
		{name: "client CA not expected", change: func(s *authnState) { s.ClientCAExpected, s.ClientCAs = false, 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := ready
			tc.change(&s)
			err := authenticationNotReady(s)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("not ready: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("ready; want not ready")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not say %q", err, w)
				}
			}
		})
	}
}

// staticCA is a CA bundle provider with fixed content, possibly none.
type staticCA []byte

func newStaticCA(b []byte) staticCA { return staticCA(b) }

func (c staticCA) Name() string                              { return "static" }
func (c staticCA) CurrentCABundleContent() []byte            { return c }
func (c staticCA) VerifyOptions() (x509.VerifyOptions, bool) { return x509.VerifyOptions{}, false }
func (c staticCA) AddListener(dynamiccertificates.Listener)  {}

func TestAuthReadinessState(t *testing.T) {
	mk := func(host string) []byte {
		chain, _, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(chain) // the chain is a certificate and its self-signed CA: one is enough
		return pem.EncodeToMemory(block)
	}
	clientCA, frontProxyCA := mk("client-ca"), mk("front-proxy-ca")
	headers := headerrequest.StaticStringSlice{"X-Remote-User"}
	for _, tc := range []struct {
		name        string
		union       []byte
		rhCA        []byte
		wantClient  int
		wantRH      int
		wantHeaders int
	}{
		{name: "both loaded", union: append(append([]byte{}, clientCA...), frontProxyCA...), rhCA: frontProxyCA, wantClient: 1, wantRH: 1, wantHeaders: 1},
		{name: "the same CA for both", union: append(append([]byte{}, frontProxyCA...), frontProxyCA...), rhCA: frontProxyCA, wantClient: 1, wantRH: 1, wantHeaders: 1},
		{name: "client CA missing", union: frontProxyCA, rhCA: frontProxyCA, wantClient: 0, wantRH: 1, wantHeaders: 1},
		{name: "request-header CA missing", union: clientCA, rhCA: nil, wantClient: 1, wantRH: 0, wantHeaders: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Auth{
				ClientCAExpected: true, RequestHeaderExpected: true, ClientCAs: newStaticCA(tc.union),
				RequestHeader: &authenticatorfactory.RequestHeaderConfig{CAContentProvider: newStaticCA(tc.rhCA), UsernameHeaders: headers},
			}
			s := a.state()
			if s.ClientCAs != tc.wantClient || s.RequestHeaderCAs != tc.wantRH || s.UsernameHeaders != tc.wantHeaders {
				t.Fatalf("state %+v; want %d client CAs, %d request-header CAs, %d username headers", s, tc.wantClient, tc.wantRH, tc.wantHeaders)
			}
		})
	}
}

// fakeAuthorizer answers with err until it is cleared, and counts calls.
type fakeAuthorizer struct {
	err   error
	calls int
}

func (f *fakeAuthorizer) Authorize(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
	f.calls++
	if f.err != nil {
		return authorizer.DecisionNoOpinion, "", f.err
	}
	return authorizer.DecisionNoOpinion, "no RBAC for the probe", nil
}

func TestCheckAuthorizationLatches(t *testing.T) {
	f := &fakeAuthorizer{err: errors.New("subjectaccessreviews.authorization.k8s.io is forbidden")}
	a := &Auth{Authorizer: authorizer.AuthorizerFunc(f.Authorize)}
	r := httptest.NewRequest("GET", "/readyz", nil)
	err := a.CheckAuthorization(r)
	if err == nil || !strings.Contains(err.Error(), "SubjectAccessReview") || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("with a failing Authorizer: %v; want not ready, saying why", err)
	}
	f.err = nil
	// A denial is an answer: authorization works.
	if err := a.CheckAuthorization(r); err != nil {
		t.Fatalf("once the authorizer answers: %v", err)
	}
	calls := f.calls
	f.err = errors.New("kube-apiserver is gone")
	for range 3 {
		if err := a.CheckAuthorization(r); err != nil {
			t.Fatalf("after it answered once: %v", err)
		}
	}
	if f.calls != calls {
		t.Errorf("%d more SubjectAccessReviews after the first answer; want none (no periodic API calls)", f.calls-calls)
	}
	if err := (&Auth{}).CheckAuthorization(r); err != nil {
		t.Errorf("with authorization off: %v", err)
	}
}

// TestAuthenticationUsableLatches: once both CAs were loaded, AuthenticationUsable passes for good (a
// loaded bundle is never emptied again; each request then costs an atomic load).
func TestAuthenticationUsableLatches(t *testing.T) {
	a := &Auth{ClientCAExpected: true}
	if err := a.AuthenticationUsable(); err == nil || !strings.Contains(err.Error(), "client CA") {
		t.Fatalf("before the client CA is loaded: %v; want an error naming it", err)
	}
	a.ClientCAs = newStaticCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")}))
	if err := a.AuthenticationUsable(); err != nil {
		t.Fatalf("once loaded: %v", err)
	}
	a.ClientCAs = nil // never happens; the answer is latched anyway
	if err := a.AuthenticationUsable(); err != nil {
		t.Fatalf("after it was usable once: %v", err)
	}
}
