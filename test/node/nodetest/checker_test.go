package nodetest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2/textlogger"

	"github.com/certapi/certapi/pkg/issuer"
)

// selfSigned makes a CA, and a leaf it signs.
func selfSigned(t *testing.T, name string) (*x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "leaf"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return ca, leafDER
}

func TestCheckHistory(t *testing.T) {
	line, fromLine := selfSigned(t, "certapi")
	_, fromOther := selfSigned(t, "a second CA")
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	ok := func(kind OpKind, name, mark string, s int) Op {
		return Op{Kind: kind, Name: name, Mark: mark, Start: at(s), End: at(s).Add(time.Millisecond)}
	}
	failed := func(kind OpKind, name, mark string, s int) Op {
		o := ok(kind, name, mark, s)
		o.Err = errors.New("the server is currently unable to handle the request")
		return o
	}
	refused := func(kind OpKind, name, mark string, s int) Op {
		o := ok(kind, name, mark, s)
		o.Err = apierrors.NewAlreadyExists(schema.GroupResource{Group: "certapi.dev", Resource: "servingcertrequests"}, name)
		return o
	}
	// retried is o after client-go sent it again: its first attempt answered status.
	retried := func(o Op, status int) Op {
		o.Attempts = []Attempt{{Method: "POST", Status: status}, {Method: "POST", Status: 200}}
		return o
	}
	notFound := func(kind OpKind, name string, s int) Op {
		o := ok(kind, name, "", s)
		o.Err = apierrors.NewNotFound(schema.GroupResource{Group: "certapi.dev", Resource: "servingcertrequests"}, name)
		return o
	}
	issued := func(der []byte, s int) Op {
		o := ok(OpIssue, "a", "", s)
		o.Certificate = der
		return o
	}
	for _, tc := range []struct {
		name   string
		ops    []Op
		final  map[string]string
		broken []string // a fragment of each violation, in order
	}{
		{name: "an acknowledged create is there", ops: []Op{ok(OpCreate, "a", "m1", 1)}, final: map[string]string{"a": "m1"}},
		{name: "an acknowledged create lost", ops: []Op{ok(OpCreate, "a", "m1", 1)}, final: map[string]string{}, broken: []string{"a absent at the end; it may be only m1"}},
		{name: "an acknowledged update lost", ops: []Op{ok(OpCreate, "a", "m1", 1), ok(OpUpdate, "a", "m2", 2)}, final: map[string]string{"a": "m1"}, broken: []string{"a holds m1 at the end; it may be only m2"}},
		{name: "a failed update may have applied", ops: []Op{ok(OpCreate, "a", "m1", 1), failed(OpUpdate, "a", "m2", 2)}, final: map[string]string{"a": "m2"}},
		{name: "or not", ops: []Op{ok(OpCreate, "a", "m1", 1), failed(OpUpdate, "a", "m2", 2)}, final: map[string]string{"a": "m1"}},
		{name: "an acknowledged delete", ops: []Op{ok(OpCreate, "a", "m1", 1), ok(OpDelete, "a", "", 2)}, final: map[string]string{}},
		{name: "an acknowledged delete undone", ops: []Op{ok(OpCreate, "a", "m1", 1), ok(OpDelete, "a", "", 2)}, final: map[string]string{"a": "m1"}, broken: []string{"a holds m1 at the end; it may be only absent"}},
		{name: "a failed delete may have applied", ops: []Op{ok(OpCreate, "a", "m1", 1), failed(OpDelete, "a", "", 2)}, final: map[string]string{}},
		{name: "a failed create only", ops: []Op{failed(OpCreate, "a", "m1", 1)}, final: map[string]string{}},
		{
			name:  "a write acknowledged after failed ones decides",
			ops:   []Op{failed(OpCreate, "a", "m1", 1), ok(OpCreate, "a", "m2", 2), failed(OpUpdate, "a", "m3", 3), ok(OpUpdate, "a", "m4", 4)},
			final: map[string]string{"a": "m3"}, broken: []string{"a holds m3 at the end; it may be only m4"},
		},
		{
			name:  "a delete that timed out may land after a later acknowledged write",
			ops:   []Op{ok(OpCreate, "a", "m1", 1), failed(OpDelete, "a", "", 2), ok(OpUpdate, "a", "m2", 3)},
			final: map[string]string{},
		},
		{
			name:  "an update that timed out before an acknowledged write was overwritten",
			ops:   []Op{ok(OpCreate, "a", "m1", 1), failed(OpUpdate, "a", "m2", 2), ok(OpUpdate, "a", "m3", 3)},
			final: map[string]string{"a": "m2"}, broken: []string{"a holds m2 at the end; it may be only m3"},
		},
		{
			name:  "a refused create wrote nothing",
			ops:   []Op{ok(OpCreate, "a", "m1", 1), ok(OpDelete, "a", "", 2), refused(OpCreate, "a", "m2", 3)},
			final: map[string]string{"a": "m2"}, broken: []string{"a holds m2 at the end; it may be only absent"},
		},
		{
			name:  "a create sent again after a 503 may land once more after a later delete",
			ops:   []Op{retried(ok(OpCreate, "a", "m1", 1), 503), ok(OpDelete, "a", "", 2)},
			final: map[string]string{"a": "m1"},
		},
		{
			name:  "not after a 429, which served nothing",
			ops:   []Op{retried(ok(OpCreate, "a", "m1", 1), 429), ok(OpDelete, "a", "", 2)},
			final: map[string]string{"a": "m1"}, broken: []string{"a holds m1 at the end; it may be only absent"},
		},
		{
			name:  "a create refused as existing after a 503 may be its own first attempt",
			ops:   []Op{retried(refused(OpCreate, "a", "m1", 1), 503)},
			final: map[string]string{"a": "m1"},
		},
		{
			name:  "a delete not found after a 503 may have deleted",
			ops:   []Op{ok(OpCreate, "a", "m1", 1), retried(notFound(OpDelete, "a", 2), 503)},
			final: map[string]string{},
		},
		{
			name:  "a delete not found at its first attempt deleted nothing",
			ops:   []Op{ok(OpCreate, "a", "m1", 1), notFound(OpDelete, "a", 2)},
			final: map[string]string{}, broken: []string{"a absent at the end; it may be only m1"},
		},
		{name: "order is by start, not by the slice", ops: []Op{ok(OpUpdate, "a", "m2", 2), ok(OpCreate, "a", "m1", 1)}, final: map[string]string{"a": "m2"}},
		{name: "a request nobody wrote", ops: nil, final: map[string]string{"x": "mx"}, broken: []string{"x holds mx, and no operation wrote it"}},
		{name: "a certificate of the line", ops: []Op{ok(OpCreate, "a", "m1", 1), issued(fromLine, 2)}, final: map[string]string{"a": "m1"}},
		{name: "a certificate of a second CA", ops: []Op{ok(OpCreate, "a", "m1", 1), issued(fromOther, 2)}, final: map[string]string{"a": "m1"}, broken: []string{`signed by "CN=a second CA", no CA of the line`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckHistory(tc.ops, tc.final, []*x509.Certificate{line})
			if len(got) != len(tc.broken) {
				t.Fatalf("CheckHistory = %q; want %d violations %q", got, len(tc.broken), tc.broken)
			}
			for i, want := range tc.broken {
				if !strings.Contains(got[i].What, want) {
					t.Errorf("violation %d = %q; want it to say %q", i, got[i], want)
				}
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	ops := []Op{
		{Kind: OpCreate, Name: "a", Start: at(0), End: at(10)},
		{Kind: OpIssue, Name: "a", Start: at(100), End: at(110)},
		{Kind: OpIssue, Name: "a", Start: at(200), End: at(210), Err: errors.New("503")},
		{Kind: OpIssue, Name: "a", Start: at(1500), End: at(1510)},
		{Kind: OpDelete, Name: "a", Start: at(1600), End: at(3600)},
	}
	want := "create 1 (0 failed), delete 1 (0 failed), issue 3 (1 failed); acknowledged in median 10ms, slowest 2s; longest time without a certificate issued 2.09s"
	if got := Summarize(ops); got != want {
		t.Errorf("Summarize = %q; want %q", got, want)
	}
}

func TestAnswers(t *testing.T) {
	ops := []Op{
		{Kind: OpIssue, Name: "a", Err: errors.New("the server is currently unable to handle the request (post servingcertrequests.certapi.dev a)")},
		{Kind: OpIssue, Name: "b", Err: errors.New("the server is currently unable to handle the request (post servingcertrequests.certapi.dev b)")},
		{Kind: OpCreate, Name: "a", Err: errors.New("etcdserver: request timed out")},
		{Kind: OpCreate, Name: "c"},
	}
	want := `2 "the server is currently unable to handle the request", 1 "etcdserver: request timed out"`
	if got := Answers(ops); got != want {
		t.Errorf("Answers = %s; want %s", got, want)
	}
	if got := Answers(ops[3:]); got != "none failed" {
		t.Errorf("Answers of none failed = %s", got)
	}
}

func TestParseSignatures(t *testing.T) {
	var log bytes.Buffer
	logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&log)))
	at := time.Date(2026, 12, 7, 20, 4, 54, 18473000, time.UTC)
	// As the issuer logs it, and as a logger without a name would.
	logger.WithName("issuer").V(0).Info(issuer.SignedLog, "identity", "certapi-1", "term", int64(4107), "serialNumber", "af9fda40b1", "leaseValidAt", at.Format(time.RFC3339Nano))
	logger.Info(issuer.SignedLog, "identity", "certapi-2", "term", int64(4108), "serialNumber", "af9fda40b2", "leaseValidAt", at.Format(time.RFC3339Nano))
	log.WriteString(`I1207 20:04:54.018473       1 election.go:132] "Leading: signing with the Active CA" identity="certapi-1"` + "\n")
	got, err := ParseSignatures(log.String())
	if err != nil {
		t.Fatal(err)
	}
	want := []Signature{{Replica: "certapi-1", Term: 4107, Serial: "af9fda40b1", At: at}, {Replica: "certapi-2", Term: 4108, Serial: "af9fda40b2", At: at}}
	if !slices.Equal(got, want) {
		t.Fatalf("ParseSignatures of\n%s= %+v; want %+v", log.String(), got, want)
	}
	if _, err := ParseSignatures(`"` + issuer.SignedLog + `" identity="certapi-1" term=1` + "\n"); err == nil {
		t.Error("a signature line without its serial number parsed")
	}
}

func TestCheckFencing(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC)
	sig := func(replica string, term int64, ms int) Signature {
		return Signature{Replica: replica, Term: term, Serial: fmt.Sprintf("%x", ms), At: t0.Add(time.Duration(ms) * time.Millisecond)}
	}
	for _, tc := range []struct {
		name   string
		sigs   []Signature
		broken []string
	}{
		{name: "no signatures"},
		{name: "one term", sigs: []Signature{sig("certapi-0", 10, 1), sig("certapi-0", 10, 2)}},
		{name: "terms one after another, logged out of order",
			sigs: []Signature{sig("certapi-1", 20, 30), sig("certapi-0", 10, 1), sig("certapi-0", 10, 5), sig("certapi-2", 31, 40), sig("certapi-0", 35, 50)}},
		{name: "the old leader signs after the new one began",
			sigs:   []Signature{sig("certapi-0", 10, 1), sig("certapi-1", 20, 30), sig("certapi-0", 10, 31), sig("certapi-1", 20, 32)},
			broken: []string{"certapi-0 signed serial 1f in term 10"}},
		{name: "one term, two replicas",
			sigs:   []Signature{sig("certapi-0", 10, 1), sig("certapi-1", 10, 2)},
			broken: []string{"term 10 signed by two replicas, certapi-0 and certapi-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckFencing(tc.sigs)
			if len(got) != len(tc.broken) {
				t.Fatalf("CheckFencing = %v; want %d violations %v", got, len(tc.broken), tc.broken)
			}
			for i, v := range got {
				if !strings.Contains(v.What, tc.broken[i]) {
					t.Errorf("violation %d: %q; want it to say %q", i, v.What, tc.broken[i])
				}
			}
		})
	}
}
