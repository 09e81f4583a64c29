package issuer

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/signer/signertest"
)

// crafted makes a certificate from a template like signer.NewCA's for signertest.ClusterDomain, changed
// by edit, signed by parent's key (self-signed when parent is nil).
func crafted(t *testing.T, now time.Time, edit func(*x509.Certificate), parent *signer.CA) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := signer.RandomSerial()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: pkix.Name{CommonName: signer.CACommonNamePrefix + "1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		SubjectKeyId: []byte{1, 2, 3, 4}, PermittedDNSDomainsCritical: true,
		PermittedDNSDomains: signer.PermittedDNSDomains(signertest.ClusterDomain),
	}
	if edit != nil {
		edit(tmpl)
	}
	issuerCert, signKey := tmpl, crypto.Signer(key)
	if parent != nil {
		issuerCert, signKey = parent.Certificate, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuerCert, key.Public(), signKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestDecideRecovery(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const maxLeaf = 2160 * time.Hour
	year := 365 * 24 * time.Hour
	active := signertest.NewCA(t, now.Add(-100*24*time.Hour), year)   // the lost Active CA
	retiring := signertest.NewCA(t, now.Add(-300*24*time.Hour), year) // a Retiring one, 65 days left
	next := signertest.NewCA(t, now.Add(-time.Hour), year)            // a Next one
	expired := signertest.NewCA(t, now.Add(-2*year), year)            // expired a year ago
	future := signertest.NewCA(t, now.Add(time.Hour), year)           // not valid yet
	otherDomain, err := signer.NewCA(signer.CAOptions{ClusterDomain: "other.example", Duration: year, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	foreign := crafted(t, now, func(c *x509.Certificate) { c.Subject.CommonName = "cert-manager-ca" }, nil)
	noConstraints := crafted(t, now, func(c *x509.Certificate) { c.PermittedDNSDomains, c.PermittedDNSDomainsCritical = nil, false }, nil)
	widened := crafted(t, now, func(c *x509.Certificate) { c.PermittedDNSDomains = append(c.PermittedDNSDomains, "example.com") }, nil)
	notCA := crafted(t, now, func(c *x509.Certificate) { c.IsCA, c.KeyUsage = false, x509.KeyUsageDigitalSignature }, nil)
	notSelfSigned := crafted(t, now, nil, active)
	earlier := crafted(t, now, nil, nil) // as an earlier signer.NewCA made it: no URI, e-mail or extended key usage constraints
	uriWidened := crafted(t, now, func(c *x509.Certificate) { c.PermittedURIDomains = []string{"example.com"} }, nil)
	emailPermittedOnly := crafted(t, now, func(c *x509.Certificate) {
		c.PermittedURIDomains, c.ExcludedURIDomains = []string{signer.ForbiddingConstraint}, []string{signer.ForbiddingConstraint}
		c.PermittedEmailAddresses = []string{signer.ForbiddingConstraint} // without the excluded subtree, names under it pass
	}, nil)
	pemOf := func(certs ...*x509.Certificate) []byte { return signer.EncodeBundle(certs...) }
	serial := func(c *x509.Certificate) string { return signer.FormatSerialNumber(c.SerialNumber) }
	const apiService, ctb = "APIService v1alpha1.certapi.dev", "ClusterTrustBundle certapi.dev:serving:ca"

	type kept struct {
		serial  string
		until   time.Time
		sources []string
	}
	tests := []struct {
		name       string
		published  []PublishedBundle
		maxLeaf    time.Duration
		wantNil    bool
		wantKept   []kept
		wantSkip   map[string]string // serial (or "" for a block) -> substring of the reason
		wantNoKept bool
	}{
		{name: "first start: nothing published", wantNil: true},
		{name: "first start: an APIService with no caBundle is not read (the reader leaves it out)", published: nil, wantNil: true},
		{
			name:      "the lost Active CA, in both sources: kept until the longest certificate it signed has expired",
			published: []PublishedBundle{{Source: apiService, PEM: pemOf(active.Certificate)}, {Source: ctb, PEM: pemOf(active.Certificate)}},
			maxLeaf:   maxLeaf,
			wantKept:  []kept{{serial(active.Certificate), now.Add(maxLeaf), []string{apiService, ctb}}},
		},
		{
			name:      "a Retiring CA that expires before that: kept until its notAfter",
			published: []PublishedBundle{{Source: ctb, PEM: pemOf(active.Certificate, retiring.Certificate)}},
			maxLeaf:   maxLeaf,
			wantKept: []kept{
				{serial(active.Certificate), now.Add(maxLeaf), []string{ctb}},
				{serial(retiring.Certificate), retiring.Certificate.NotAfter, []string{ctb}},
			},
		},
		{
			name:      "no cap on certificates: each CA is kept until its notAfter",
			published: []PublishedBundle{{Source: apiService, PEM: pemOf(next.Certificate)}},
			wantKept:  []kept{{serial(next.Certificate), next.Certificate.NotAfter, []string{apiService}}},
		},
		{
			name:      "a CA of an earlier version, without URI and e-mail constraints: kept",
			published: []PublishedBundle{{Source: apiService, PEM: pemOf(earlier)}},
			maxLeaf:   maxLeaf,
			wantKept:  []kept{{serial(earlier), now.Add(maxLeaf), []string{apiService}}},
		},
		{
			name: "what is not a valid CA of certapi's for this cluster domain is not kept, and says why",
			published: []PublishedBundle{{Source: apiService, PEM: pemOf(active.Certificate, expired.Certificate, future.Certificate, otherDomain.Certificate,
				foreign, noConstraints, widened, uriWidened, emailPermittedOnly, notCA, notSelfSigned)}},
			maxLeaf:  maxLeaf,
			wantKept: []kept{{serial(active.Certificate), now.Add(maxLeaf), []string{apiService}}},
			wantSkip: map[string]string{
				serial(expired.Certificate): "expired", serial(future.Certificate): "not valid until",
				serial(otherDomain.Certificate): "name constraints", serial(foreign): "common name",
				serial(noConstraints): "name constraints", serial(widened): "name constraints",
				serial(uriWidened): "name constraints", serial(emailPermittedOnly): "name constraints",
				serial(notCA): "not a CA", serial(notSelfSigned): "not self-signed",
			},
		},
		{
			name:       "only certificates that cannot be kept: a Recovery with none kept",
			published:  []PublishedBundle{{Source: ctb, PEM: pemOf(expired.Certificate)}},
			wantNoKept: true,
			wantSkip:   map[string]string{serial(expired.Certificate): "expired"},
		},
		{
			name:       "a certificate that does not parse: reported, nothing kept",
			published:  []PublishedBundle{{Source: apiService, PEM: []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")}},
			wantNoKept: true,
			wantSkip:   map[string]string{"": "certificate 1 does not parse"},
		},
		{
			name:      "a block of another type: reported by its type alone, the CA beside it kept",
			published: []PublishedBundle{{Source: ctb, PEM: append([]byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), pemOf(next.Certificate)...)}},
			wantKept:  []kept{{serial(next.Certificate), next.Certificate.NotAfter, []string{ctb}}},
			wantSkip:  map[string]string{"": `block 1 is a "PUBLIC KEY"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			retiring, rec := decideRecovery(recoveryInput{Published: tc.published, ClusterDomain: signertest.ClusterDomain, MaxCertificateDuration: tc.maxLeaf, Now: now})
			if tc.wantNil {
				if rec != nil || retiring != nil {
					t.Fatalf("recovery %+v, retiring %d; want none", rec, len(retiring))
				}
				return
			}
			if rec == nil {
				t.Fatal("no Recovery")
			}
			if !rec.At.Equal(now) {
				t.Errorf("At %s; want %s", rec.At, now)
			}
			if tc.wantNoKept && (len(rec.Kept) != 0 || len(retiring) != 0) {
				t.Errorf("kept %+v; want none", rec.Kept)
			}
			if len(rec.Kept) != len(tc.wantKept) || len(retiring) != len(tc.wantKept) {
				t.Fatalf("kept %+v (%d Retiring); want %d", rec.Kept, len(retiring), len(tc.wantKept))
			}
			for i, w := range tc.wantKept {
				k, r := rec.Kept[i], retiring[i]
				if k.SerialNumber != w.serial || !k.Until.Equal(w.until) || !slices.Equal(k.Sources, w.sources) {
					t.Errorf("kept[%d] = %+v; want serial %s until %s from %v", i, k, w.serial, w.until, w.sources)
				}
				if signer.FormatSerialNumber(r.CA.Certificate.SerialNumber) != w.serial || !r.Until.Equal(w.until) || r.Distrusted || r.CA.Key != nil {
					t.Errorf("Retiring[%d] = serial %s until %s, distrusted %v, with key %v", i, signer.FormatSerialNumber(r.CA.Certificate.SerialNumber), r.Until, r.Distrusted, r.CA.Key != nil)
				}
			}
			if len(rec.Skipped) != len(tc.wantSkip) {
				t.Errorf("skipped %+v; want %d", rec.Skipped, len(tc.wantSkip))
			}
			for _, s := range rec.Skipped {
				if want, ok := tc.wantSkip[s.SerialNumber]; !ok || !strings.Contains(s.Reason, want) {
					t.Errorf("skipped %s: %q; want a reason with %q", s.SerialNumber, s.Reason, want)
				}
			}
		})
	}
}

// TestDecideRecoveryBoundsTheKept: of more CAs than MaxRecoveredCAs, those valid longest are kept.
func TestDecideRecoveryBoundsTheKept(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var certs []*x509.Certificate
	for i := range MaxRecoveredCAs + 2 {
		certs = append(certs, signertest.NewCA(t, now.Add(-time.Duration(i+1)*24*time.Hour), 365*24*time.Hour).Certificate)
	}
	retiring, rec := decideRecovery(recoveryInput{Published: []PublishedBundle{{Source: "s", PEM: signer.EncodeBundle(certs...)}},
		ClusterDomain: signertest.ClusterDomain, Now: now})
	if len(retiring) != MaxRecoveredCAs || len(rec.Kept) != MaxRecoveredCAs || len(rec.Skipped) != 2 {
		t.Fatalf("kept %d (%d Retiring), skipped %d; want %d and 2", len(rec.Kept), len(retiring), len(rec.Skipped), MaxRecoveredCAs)
	}
	for i, k := range rec.Kept {
		if k.SerialNumber != signer.FormatSerialNumber(certs[i].SerialNumber) {
			t.Errorf("kept[%d] is %s; want the CA made %d days ago", i, k.SerialNumber, i+1)
		}
	}
	for _, s := range rec.Skipped {
		if !strings.Contains(s.Reason, "more than") {
			t.Errorf("skipped %s: %q", s.SerialNumber, s.Reason)
		}
	}
}

// TestNoRecordKeepsThePublishedCAs: a leader that finds no CA record reads what certapi had published
// before it creates a CA, keeps the CAs of certapi's it finds there as Retiring, and stores what it did
// with the record, so that a later leader reports it too; with a record stored, nothing is read.
func TestNoRecordKeepsThePublishedCAs(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	lost := signertest.NewCA(t, now.Add(-24*time.Hour), 0)
	reads := 0
	st := &memStore{}
	i := &Issuer{cfg: Config{Clock: clocktesting.NewFakePassiveClock(now), ClusterDomain: signertest.ClusterDomain, CADuration: signer.DefaultCADuration,
		MaxCertificateDuration: time.Hour,
		PublishedBundles: func(context.Context) ([]PublishedBundle, error) {
			reads++
			return []PublishedBundle{{Source: "APIService v1alpha1.certapi.dev", PEM: signer.EncodeBundle(lost.Certificate)}}, nil
		}}, store: st, now: time.Now}

	l, created, err := i.loadOrCreateCA(context.Background(), "leader", 1)
	if err != nil || !created {
		t.Fatalf("created %v, %v", created, err)
	}
	if reads != 1 {
		t.Errorf("published bundles read %d times; want once", reads)
	}
	if len(l.auth.Retiring) != 1 || !l.auth.Retiring[0].CA.Certificate.Equal(lost.Certificate) || !l.auth.Retiring[0].Until.Equal(now.Add(time.Hour)) {
		t.Fatalf("Retiring %+v; want the lost CA until an hour from now", l.auth.Retiring)
	}
	if l.auth.Active.Certificate.Equal(lost.Certificate) {
		t.Fatal("the lost CA is Active")
	}
	bundle, err := signer.ParseBundle(l.auth.Bundle())
	if err != nil || len(bundle) != 2 {
		t.Fatalf("bundle of %d CAs (%v); want the new and the lost", len(bundle), err)
	}
	if l.recovery == nil || len(l.recovery.Kept) != 1 || st.rec != l.recovery {
		t.Fatalf("recovery %+v, stored %+v", l.recovery, st.rec)
	}
	rec, err := encodeRecord(st.auth)
	if err != nil {
		t.Fatal(err)
	}
	rec.Recovery = st.rec
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back caRecord
	if err := json.Unmarshal(data, &back); err != nil || back.Recovery == nil || back.Recovery.Kept[0].SerialNumber != l.recovery.Kept[0].SerialNumber {
		t.Fatalf("the record's recovery does not survive JSON: %s (%v)", data, err)
	}

	// A later term loads the record, reads nothing, and reports the same Recovery, not as its own.
	l2, created, err := i.loadOrCreateCA(context.Background(), "leader", 1)
	if err != nil || created || reads != 1 || l2.recovery != l.recovery {
		t.Fatalf("second load: created %v, %d reads, recovery %+v, %v", created, reads, l2.recovery, err)
	}
}

// TestNoRecordWaitsForThePublishedBundles: when they cannot be read, no CA is created (the term fails and
// the election tries again), rather than a CA that trusts nothing certapi had published.
func TestNoRecordWaitsForThePublishedBundles(t *testing.T) {
	st := &memStore{}
	i := &Issuer{cfg: Config{Clock: clocktesting.NewFakePassiveClock(time.Now()), ClusterDomain: signertest.ClusterDomain,
		PublishedBundles: func(context.Context) ([]PublishedBundle, error) {
			return nil, context.DeadlineExceeded
		}}, store: st, now: time.Now}
	if _, _, err := i.loadOrCreateCA(context.Background(), "leader", 1); err == nil || !strings.Contains(err.Error(), "had published") {
		t.Fatalf("err %v; want one that says the published bundles could not be read", err)
	}
	if st.saves != 0 {
		t.Errorf("%d records saved; want none", st.saves)
	}
}
