package issuer

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/certapi/certapi/pkg/signer"
)

// MaxRecoveredCAs bounds the CAs a leader that finds no CA record keeps from what certapi had published:
// a bundle of certapi's holds at most an Active, a Next and a Retiring CA or two.
const MaxRecoveredCAs = 4

// recoveryInput is everything decideRecovery looks at.
type recoveryInput struct {
	// Published are the bundles read from the objects certapi had published its bundle in.
	Published []PublishedBundle
	// ClusterDomain is the one this certapi signs for: a CA of certapi's carries its name constraints.
	ClusterDomain string
	// MaxCertificateDuration, when positive, is the longest lifetime of a certificate certapi signs: no
	// certificate a found CA signed before now can be valid after now plus it.
	MaxCertificateDuration time.Duration
	Now                    time.Time
}

// decideRecovery says which of the CAs found in what certapi had published a leader that finds no CA
// record keeps as Retiring, beside the new Active CA, and until when: so that certificates they signed
// (delivered Secrets, webhooks serving them) stay trusted until they expire, instead of every
// injection target dropping them at once. It returns the Retiring CAs to store and the Recovery to
// record, nil when the bundles held no certificate at all (a first start: nothing was published).
//
// A certificate is kept only if it is a CA certapi made for this cluster domain: a self-signed CA
// certificate whose common name starts with signer.CACommonNamePrefix and whose critical DNS name
// constraints are exactly signer.PermittedDNSDomains, that permits no IP address, whose URI and e-mail
// constraints are none or signer.NewCA's (certapiURIAndEmailConstraints), valid now. So even a CA planted
// in a source can vouch for no more than certapi's own can. Each stays until its notAfter or now plus
// MaxCertificateDuration, whichever is first (as after a switch: no certificate it signed can be valid
// later), and at most MaxRecoveredCAs are kept, those valid longest first. A pure function of its input.
func decideRecovery(in recoveryInput) ([]signer.Retiring, *Recovery) {
	type found struct {
		cert    *x509.Certificate
		sources []string
		problem string // why it is not kept; "" when it may be
	}
	var all []*found
	var unparsed []RecoveredCA
	for _, b := range in.Published {
		rest := b.PEM
		for n := 1; ; n++ {
			var block *pem.Block
			block, rest = pem.Decode(rest)
			if block == nil {
				break
			}
			if block.Type != "CERTIFICATE" {
				unparsed = append(unparsed, RecoveredCA{Sources: []string{b.Source}, Reason: fmt.Sprintf("block %d is a %q, not a CERTIFICATE", n, truncated(block.Type))})
				continue
			}
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				unparsed = append(unparsed, RecoveredCA{Sources: []string{b.Source}, Reason: fmt.Sprintf("certificate %d does not parse", n)})
				continue
			}
			i := slices.IndexFunc(all, func(f *found) bool { return bytes.Equal(f.cert.Raw, cert.Raw) })
			if i < 0 {
				all = append(all, &found{cert: cert, problem: notCertapiCA(cert, in.ClusterDomain, in.Now)})
				i = len(all) - 1
			}
			if !slices.Contains(all[i].sources, b.Source) {
				all[i].sources = append(all[i].sources, b.Source)
			}
		}
	}
	if len(all) == 0 && len(unparsed) == 0 {
		return nil, nil
	}

	// The ones that may be kept, valid longest first; beyond MaxRecoveredCAs they are not.
	slices.SortStableFunc(all, func(a, b *found) int {
		if ok, bok := a.problem == "", b.problem == ""; ok != bok {
			if ok {
				return -1
			}
			return 1
		}
		if c := b.cert.NotAfter.Compare(a.cert.NotAfter); c != 0 {
			return c
		}
		return a.cert.SerialNumber.Cmp(b.cert.SerialNumber)
	})
	rec := &Recovery{At: in.Now}
	var retiring []signer.Retiring
	for _, f := range all {
		ref := RecoveredCA{SerialNumber: signer.FormatSerialNumber(f.cert.SerialNumber), Sources: f.sources, NotAfter: f.cert.NotAfter}
		if f.problem == "" && len(retiring) == MaxRecoveredCAs {
			f.problem = fmt.Sprintf("more than %d CAs of certapi's were found; those valid longest are kept", MaxRecoveredCAs)
		}
		if f.problem != "" {
			ref.Reason = f.problem
			rec.Skipped = append(rec.Skipped, ref)
			continue
		}
		ca, err := signer.LoadCACertificate(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.cert.Raw}))
		if err != nil { // notCertapiCA checked what LoadCACertificate does; kept for safety
			ref.Reason = err.Error()
			rec.Skipped = append(rec.Skipped, ref)
			continue
		}
		until := f.cert.NotAfter
		if d := in.MaxCertificateDuration; d > 0 && in.Now.Add(d).Before(until) {
			until = in.Now.Add(d)
		}
		ref.Until = until
		rec.Kept = append(rec.Kept, ref)
		retiring = append(retiring, signer.Retiring{CA: ca, Until: until})
	}
	rec.Skipped = append(rec.Skipped, unparsed...)
	return retiring, rec
}

// notCertapiCA says why cert is not a CA certapi made for clusterDomain that is valid at now, or "" when
// it is one.
func notCertapiCA(cert *x509.Certificate, clusterDomain string, now time.Time) string {
	switch {
	case !cert.BasicConstraintsValid || !cert.IsCA:
		return "not a CA certificate"
	case !strings.HasPrefix(cert.Subject.CommonName, signer.CACommonNamePrefix):
		return fmt.Sprintf("not a CA of certapi's (its common name does not start with %q)", signer.CACommonNamePrefix)
	case cert.KeyUsage&x509.KeyUsageCertSign == 0:
		return "its key usage does not include certSign"
	case len(cert.SubjectKeyId) == 0:
		return "it has no subject key identifier"
	case !bytes.Equal(cert.RawIssuer, cert.RawSubject) || cert.CheckSignatureFrom(cert) != nil:
		return "not self-signed"
	case !cert.PermittedDNSDomainsCritical || !sameSet(cert.PermittedDNSDomains, signer.PermittedDNSDomains(clusterDomain)) ||
		len(cert.PermittedIPRanges) > 0 || !certapiURIAndEmailConstraints(cert):
		return fmt.Sprintf("its name constraints are not those of a CA of certapi's for cluster domain %q", clusterDomain)
	case !now.Before(cert.NotAfter):
		return fmt.Sprintf("expired at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	case now.Add(signer.ClockTolerance).Before(cert.NotBefore):
		return fmt.Sprintf("not valid until %s", cert.NotBefore.UTC().Format(time.RFC3339))
	}
	return ""
}

// certapiURIAndEmailConstraints reports whether cert's URI and e-mail name constraints are those of a CA
// of certapi's: none permitted, as an earlier version wrote them (no URI or e-mail constraint at all), or
// every URI and e-mail address forbidden, as signer.NewCA writes them now. Excluded subtrees only narrow,
// so any others are accepted; a permitted subtree without the matching excluded one would let names
// through, so it is not.
func certapiURIAndEmailConstraints(cert *x509.Certificate) bool {
	if len(cert.PermittedEmailAddresses) == 0 && len(cert.PermittedURIDomains) == 0 {
		return true
	}
	return signer.ForbidsURIsAndEmails(cert)
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// truncated shortens s for a message.
func truncated(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}
