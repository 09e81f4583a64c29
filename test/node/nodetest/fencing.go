package nodetest

import (
	"crypto/x509"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/certapi/certapi/pkg/issuer"
	"github.com/certapi/certapi/pkg/signer"
)

// Signature is one certificate a replica's log says it signed (issuer.SignedLog).
type Signature struct {
	// Replica is the signer's identity (its pod's name).
	Replica string
	// Term is the revision of the replica's election key in the term it signed in.
	Term int64
	// Serial is the certificate's serial number, as signer.FormatSerialNumber writes it.
	Serial string
	// At is a moment after the signature at which the replica's election lease was known valid.
	At time.Time
}

// signedLine matches issuer.SignedLog's line in klog's text format; signedField its values, in whatever
// order and among whatever else the line holds (the logger's name, say).
var (
	signedLine  = regexp.MustCompile(`"` + regexp.QuoteMeta(issuer.SignedLog) + `"[^\n]*`)
	signedField = map[string]*regexp.Regexp{
		"identity":     regexp.MustCompile(` identity="([^"]*)"`),
		"term":         regexp.MustCompile(` term=(\d+)`),
		"serialNumber": regexp.MustCompile(` serialNumber="([0-9a-f]+)"`),
		"leaseValidAt": regexp.MustCompile(` leaseValidAt="([^"]+)"`),
	}
)

// ParseSignatures returns the signatures of a replica's log (issuer.SignedLog lines, from --v=3).
func ParseSignatures(log string) ([]Signature, error) {
	var out []Signature
	for _, line := range signedLine.FindAllString(log, -1) {
		v := map[string]string{}
		for key, re := range signedField {
			m := re.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("%q has no %s", line, key)
			}
			v[key] = m[1]
		}
		term, err := strconv.ParseInt(v["term"], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("the term of %q: %w", line, err)
		}
		at, err := time.Parse(time.RFC3339Nano, v["leaseValidAt"])
		if err != nil {
			return nil, fmt.Errorf("the time of %q: %w", line, err)
		}
		out = append(out, Signature{Replica: v["identity"], Term: term, Serial: v["serialNumber"], At: at})
	}
	return out, nil
}

// CheckFencing holds signatures (every replica's, read from the same clock: the nodes of one machine) to
// fencing: at most one replica signs at any moment. Terms are ordered by their election keys' revisions,
// and a term begins only once the lease of the one before has expired, after every moment its replica knew
// it valid; so, ordered by that moment, the terms of the signatures never go back, and each term is one
// replica's. It returns what broke that.
func CheckFencing(signatures []Signature) []Violation {
	sigs := slices.Clone(signatures)
	slices.SortStableFunc(sigs, func(a, b Signature) int { return a.At.Compare(b.At) })
	var broken []Violation
	owner := map[int64]string{}
	var last *Signature
	for i := range sigs {
		s := &sigs[i]
		if o, ok := owner[s.Term]; ok && o != s.Replica {
			broken = append(broken, Violation{What: fmt.Sprintf("term %d signed by two replicas, %s and %s (serial %s)", s.Term, o, s.Replica, s.Serial)})
		}
		owner[s.Term] = s.Replica
		if last != nil && s.Term < last.Term {
			broken = append(broken, Violation{What: fmt.Sprintf("two replicas signed at once: %s signed serial %s in term %d at %s, after %s signed serial %s in the later term %d at %s",
				s.Replica, s.Serial, s.Term, s.At.Format(time.RFC3339Nano), last.Replica, last.Serial, last.Term, last.At.Format(time.RFC3339Nano))})
			continue // hold the rest to the latest term seen
		}
		last = s
	}
	return broken
}

// checkFencing reads the signatures from logs (replicaLogs) and holds them to CheckFencing. It fails t
// when the logs hold no signature although the history has certificates (certapi not run with --v=3:
// the check would prove nothing), and logs how many of the history's certificates it found a signature
// of (a pod replaced or restarted twice takes its earlier logs with it).
func checkFencing(t *testing.T, logs map[string]string, history []Op, label string) []Violation {
	t.Helper()
	var sigs []Signature
	for container, out := range logs {
		s, err := ParseSignatures(out)
		if err != nil {
			t.Errorf("%sfencing: the log of %s: %v", label, container, err)
		}
		sigs = append(sigs, s...)
	}
	logged := map[string]bool{}
	for _, s := range sigs {
		logged[s.Serial] = true
	}
	certs, found := 0, 0
	for _, o := range history {
		if o.Kind != OpIssue || !o.Acknowledged() {
			continue
		}
		certs++
		if c, err := x509.ParseCertificate(o.Certificate); err == nil && logged[signer.FormatSerialNumber(c.SerialNumber)] {
			found++
		}
	}
	if certs > 0 && len(sigs) == 0 {
		t.Errorf("%sfencing: no replica logged %q: run certapi with --v=%d", label, issuer.SignedLog, issuer.SignedLogLevel)
		return nil
	}
	broken := CheckFencing(sigs)
	for _, v := range broken {
		t.Errorf("%sfencing: %s", label, v)
	}
	terms := map[int64]bool{}
	for _, s := range sigs {
		terms[s.Term] = true
	}
	t.Logf("%sfencing: %d signatures in %d terms, the signatures of %d of the workload's %d certificates among them; %d invariants broken",
		label, len(sigs), len(terms), found, certs, len(broken))
	return broken
}
