package apiserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/snapshot"
)

// TestCheckAuthority: a replica is not ready until it has seen CertificateAuthority/default, and says so.
func TestCheckAuthority(t *testing.T) {
	s, err := newSelfServing("certapi", "certapi-system")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		seen    bool
		wantErr string
	}{
		{name: "before the leader created it", wantErr: "CertificateAuthority/default does not exist yet"},
		{name: "once seen", seen: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.caSeen.Store(tc.seen)
			err := s.checkAuthority(nil)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("not ready: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
			}
		})
	}
}

// fakeAuthority signs as the leader's issuer does, with one CA at a time, and keeps the serving records;
// the first failRecords records fail, as a write to etcd without a leader does.
type fakeAuthority struct {
	mu          sync.Mutex
	ca          *signer.CA
	bundle      []byte
	records     []string
	failRecords int
	// attempts counts every PublishServing, failed or not.
	attempts int
}

func (f *fakeAuthority) Issue(_ context.Context, req issuer.Request) (*issuer.Result, error) {
	f.mu.Lock()
	ca, bundle := f.ca, f.bundle
	f.mu.Unlock()
	return issuer.Policy{ClusterDomain: "cluster.local"}.Sign(ca, bundle, req, time.Now())
}

func (f *fakeAuthority) PublishServing(_ context.Context, caSerial string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts++
	if f.failRecords > 0 {
		f.failRecords--
		return errors.New("etcdserver: no leader")
	}
	f.records = append(f.records, caSerial)
	return nil
}

// switchTo makes ca the Active CA, with the bundle holding every CA given.
func (f *fakeAuthority) switchTo(ca *signer.CA, trusted ...*signer.CA) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ca = ca
	var certs []*x509.Certificate
	for _, c := range trusted {
		certs = append(certs, c.Certificate)
	}
	f.bundle = signer.EncodeBundle(certs...)
}

func (f *fakeAuthority) recorded(caSerial string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.records, caSerial)
}

type listenerFunc func()

func (f listenerFunc) Enqueue() { f() }

// TestSelfServingRenewsThroughTheIssuer: certapi's own certificate is the placeholder until the issuer
// signs one, then the one served (the serving controller is told) and recorded with its CA's serial; when
// CertificateAuthority/default names a new Active CA the replica re-issues within seconds and records the
// new CA. A record that fails is retried until it is written.
func TestSelfServingRenewsThroughTheIssuer(t *testing.T) {
	now := time.Now()
	ca1, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := signer.NewCA(signer.CAOptions{ClusterDomain: "cluster.local", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	auth := &fakeAuthority{failRecords: 2}
	auth.switchTo(ca1, ca1)

	s, err := newSelfServing("certapi", "certapi-system")
	if err != nil {
		t.Fatal(err)
	}
	s.distrustedRecord = filepath.Join(t.TempDir(), snapshot.DistrustedFileName)
	placeholder, _ := s.CurrentCertKeyContent()
	if err := s.check(nil); err == nil || !strings.Contains(err.Error(), "self-signed placeholder") {
		t.Fatalf("readiness before run: %v, want the placeholder named", err)
	}
	reloads := make(chan struct{}, 100)
	s.AddListener(listenerFunc(func() { reloads <- struct{}{} }))

	caWatch := watch.NewFakeWithChanSize(10, false)
	var watches int
	var watchMu sync.Mutex
	cas := &cache.ListWatch{WatchFuncWithContext: func(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		if opts.FieldSelector != "metadata.name=default" {
			t.Errorf("the CA watch selects %q, want metadata.name=default", opts.FieldSelector)
		}
		watchMu.Lock()
		defer watchMu.Unlock()
		if watches++; watches == 1 {
			return caWatch, nil
		}
		return watch.NewFake(), nil
	}}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.run(ctx, auth, cas)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("run did not return within 10s of its context ending")
		}
	}()

	served := func() *x509.Certificate {
		certPEM, keyPEM := s.CurrentCertKeyContent()
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatalf("the content served is no certificate and key pair: %v", err)
		}
		return pair.Leaf
	}
	waitFor(t, "the first certificate", func() bool { return s.check(nil) == nil })
	select {
	case <-reloads:
	case <-time.After(10 * time.Second):
		t.Fatal("the serving controller was not told of the first certificate")
	}
	first := served()
	if certPEM, _ := s.CurrentCertKeyContent(); bytes.Equal(certPEM, placeholder) {
		t.Fatal("still serving the placeholder")
	}
	if !bytes.Equal(first.AuthorityKeyId, ca1.Certificate.SubjectKeyId) || !slices.Contains(first.DNSNames, "certapi.certapi-system.svc") {
		t.Fatalf("served %v for %v; want a certificate of CA 1 for certapi.certapi-system.svc", first.Issuer, first.DNSNames)
	}
	waitFor(t, "the record of CA 1, after two failed attempts", func() bool { return auth.recorded(signer.FormatSerialNumber(ca1.Certificate.SerialNumber)) })
	auth.mu.Lock()
	attempts := auth.attempts
	auth.mu.Unlock()
	if attempts < 3 {
		t.Fatalf("recorded after %d attempts; want the two failures retried", attempts)
	}
	if s.checkAuthority(nil) == nil {
		t.Fatal("ready before the CertificateAuthority was seen")
	}

	// The leader switches to CA 2 and CertificateAuthority/default says so.
	auth.switchTo(ca2, ca1, ca2)
	caWatch.Add(&certapiv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: certapiv1alpha1.CertificateAuthorityName},
		Status: certapiv1alpha1.CertificateAuthorityStatus{
			CABundle: string(signer.EncodeBundle(ca1.Certificate, ca2.Certificate)),
			Active:   &certapiv1alpha1.CertificateAuthorityRef{SerialNumber: signer.FormatSerialNumber(ca2.Certificate.SerialNumber), SubjectKeyID: ca2.SubjectKeyID()},
		},
	})
	waitFor(t, "a certificate of CA 2", func() bool { return bytes.Equal(served().AuthorityKeyId, ca2.Certificate.SubjectKeyId) })
	waitFor(t, "the record of CA 2", func() bool { return auth.recorded(signer.FormatSerialNumber(ca2.Certificate.SerialNumber)) })
	if err := s.checkAuthority(nil); err != nil {
		t.Fatalf("the CertificateAuthority was seen, yet: %v", err)
	}
	if err := s.check(nil); err != nil {
		t.Fatalf("not ready after the re-issue: %v", err)
	}

	// A distrust of CA 1 takes effect: this replica, leader or not, records it on its own volume.
	serial1 := signer.FormatSerialNumber(ca1.Certificate.SerialNumber)
	caWatch.Modify(&certapiv1alpha1.CertificateAuthority{
		ObjectMeta: metav1.ObjectMeta{Name: certapiv1alpha1.CertificateAuthorityName},
		Status: certapiv1alpha1.CertificateAuthorityStatus{
			CABundle: string(signer.EncodeBundle(ca2.Certificate)),
			Active:   &certapiv1alpha1.CertificateAuthorityRef{SerialNumber: signer.FormatSerialNumber(ca2.Certificate.SerialNumber), SubjectKeyID: ca2.SubjectKeyID()},
			Distrust: &certapiv1alpha1.DistrustStatus{Distrust: "leaked", StartedAt: metav1.Now(),
				Distrusted: []certapiv1alpha1.CertificateAuthorityRef{{SerialNumber: serial1, SubjectKeyID: ca1.SubjectKeyID()}}},
		},
	})
	waitFor(t, "CA 1 in this replica's record of distrusted CAs", func() bool {
		cas, err := snapshot.ReadDistrusted(s.distrustedRecord)
		return err == nil && len(cas) == 1 && cas[0].SerialNumber == serial1 && cas[0].Distrust == "leaked"
	})
}

// waitFor waits up to 10s (2s of them the re-issue's random delay at most) for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// TestSelfHandoffCheck: the leader signs a handed-over request of no ServingCertRequest only when it is
// exactly a replica's own serving certificate; requests that name one go to the stored check.
func TestSelfHandoffCheck(t *testing.T) {
	storedCalls := 0
	stored := func(context.Context, issuer.Request) error { storedCalls++; return nil }
	check := selfHandoffCheck("certapi-system", "certapi", stored)
	own := selfRequest("certapi-system", "certapi")
	own.PublicKeyPKIX = []byte("key")
	changed := func(change func(*issuer.Request)) issuer.Request {
		r := own
		change(&r)
		return r
	}
	for _, tc := range []struct {
		name    string
		req     issuer.Request
		refused bool
		stored  bool
	}{
		{name: "a replica's own serving certificate", req: own},
		{name: "a request that names a ServingCertRequest", req: changed(func(r *issuer.Request) { r.Name = "web" }), stored: true},
		{name: "another Service", req: changed(func(r *issuer.Request) { r.ServiceName = "kubernetes" }), refused: true},
		{name: "another namespace", req: changed(func(r *issuer.Request) { r.Namespace = "default" }), refused: true},
		{name: "an extra name", req: changed(func(r *issuer.Request) { r.DNSNames = []string{"x.certapi-system.svc"} }), refused: true},
		{name: "a longer lifetime", req: changed(func(r *issuer.Request) { r.Duration = 2000 * time.Hour }), refused: true},
		{name: "another path", req: changed(func(r *issuer.Request) { r.Path = issuer.PathServingCerts }), refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := storedCalls
			err := check(context.Background(), tc.req)
			if tc.refused != errors.Is(err, issuer.ErrHandoffRefused) || (!tc.refused && err != nil) {
				t.Fatalf("got %v; want refused %v", err, tc.refused)
			}
			if asked := storedCalls > before; asked != tc.stored {
				t.Fatalf("the stored check was asked: %v; want %v", asked, tc.stored)
			}
		})
	}
}
