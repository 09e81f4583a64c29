package snapshot

import (
	"strings"
	"testing"
	"time"
)

func TestDecideTarget(t *testing.T) {
	for _, tc := range []struct {
		state targetState
		force bool
		want  targetAction
	}{
		{targetAbsent, false, targetCreate},
		{targetAbsent, true, targetCreate},
		{targetEmptyDir, false, targetRemoveEmpty},
		{targetEmptyDir, true, targetRemoveEmpty},
		{targetNonEmptyDir, false, targetRefuse},
		{targetNonEmptyDir, true, targetMoveAside},
		{targetFile, false, targetNotDir},
		{targetFile, true, targetNotDir},
	} {
		if got := decideTarget(tc.state, tc.force); got != tc.want {
			t.Errorf("decideTarget(%d, force=%v) = %d, want %d", tc.state, tc.force, got, tc.want)
		}
	}
}

func TestDecideIntegrity(t *testing.T) {
	for _, tc := range []struct {
		name   string
		state  IntegrityState
		accept bool
		refuse bool
		says   []string
	}{
		{"verified", IntegrityVerified, false, false, []string{"Integrity verified"}},
		{"verified, accept given anyway", IntegrityVerified, true, false, []string{"Integrity verified"}},
		{"no key: no check possible, said", IntegrityNoKey, false, false, []string{"no integrity check", "--encryption-provider-config"}},
		{"missing", IntegrityMissing, false, true, []string{"no integrity record", "etcdctl", "Nothing was changed", "--accept-unverified-snapshot"}},
		{"missing, accepted", IntegrityMissing, true, false, []string{"WARNING", "unverified", "no integrity record"}},
		{"malformed", IntegrityMalformed, false, true, []string{"not one certapi writes"}},
		{"malformed, accepted", IntegrityMalformed, true, false, []string{"WARNING"}},
		{"another key", IntegrityUnopened, false, true, []string{"is not valid", "detail"}},
		{"another key, accepted", IntegrityUnopened, true, false, []string{"WARNING"}},
		{"changed", IntegrityMismatch, false, true, []string{"does not match", "detail"}},
		{"changed, accepted", IntegrityMismatch, true, false, []string{"WARNING"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := decideIntegrity(Integrity{State: tc.state, Record: "s.db.integrity", Detail: "detail"}, tc.accept)
			if v.Refuse != tc.refuse {
				t.Errorf("refuse = %v, want %v (%s)", v.Refuse, tc.refuse, v.Message)
			}
			for _, w := range tc.says {
				if !strings.Contains(v.Message, w) {
					t.Errorf("message %q does not say %q", v.Message, w)
				}
			}
		})
	}
}

func TestDecideDistrusted(t *testing.T) {
	at := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	leaked := DistrustedCA{SerialNumber: "aa", SubjectKeyID: "01", SHA256Fingerprint: "f1", Distrust: "leak", DistrustedAt: at}
	leakedNoPrint := DistrustedCA{SerialNumber: "aa", SubjectKeyID: "01", Distrust: "leak", DistrustedAt: at}
	other := DistrustedCA{SerialNumber: "bb", SubjectKeyID: "02", SHA256Fingerprint: "f2", Distrust: "old", DistrustedAt: at}
	held := func(cas ...DistrustedCA) SnapshotCAs {
		var s SnapshotCAs
		for _, c := range cas {
			s.CAs = append(s.CAs, SnapshotCA{DistrustedCA: c, In: "CertificateAuthority status"})
		}
		s.Found = len(cas) > 0
		return s
	}
	active := DistrustedCA{SerialNumber: "cc", SubjectKeyID: "03", SHA256Fingerprint: "f3"}
	// The same serial and key ID with another certificate (another fingerprint) is not the distrusted CA.
	sameRefOtherCert := DistrustedCA{SerialNumber: "aa", SubjectKeyID: "01", SHA256Fingerprint: "ff"}
	for _, tc := range []struct {
		name       string
		held       SnapshotCAs
		distrusted []DistrustedCA
		allow      bool
		refuse     bool
		says       []string
	}{
		{"no record", held(leaked), nil, false, false, []string{"no record of distrusted CAs", "--distrusted-cas"}},
		{"none held", held(active), []DistrustedCA{leaked, other}, false, false, []string{"holds none of the 2 CAs"}},
		{"a distrusted CA held", held(active, leaked), []DistrustedCA{leaked, other}, false, true,
			[]string{"refusing", "serial aa", "SHA-256 f1", `"leak"`, "2026-03-01T10:00:00Z", "held in CertificateAuthority status", "--allow-distrusted-cas", "Nothing was changed"}},
		{"a distrusted CA held, allowed", held(active, leaked), []DistrustedCA{leaked}, true, false, []string{"WARNING", "serial aa", "distrust again"}},
		{"recorded without a fingerprint: serial and key ID match", held(leaked), []DistrustedCA{leakedNoPrint}, false, true, []string{"serial aa"}},
		{"the same serial and key ID, another certificate", held(sameRefOtherCert), []DistrustedCA{leaked}, false, false, nil},
		{"two held", held(leaked, other), []DistrustedCA{leaked, other}, false, true, []string{"2 CA(s)", "serial aa", "serial bb"}},
		{"nothing readable", SnapshotCAs{Found: true, Unread: []string{"the CA record at revision 5: encrypted"}}, []DistrustedCA{leaked}, false, true,
			[]string{"cannot be read", "encrypted", "--encryption-provider-config"}},
		{"nothing readable, allowed", SnapshotCAs{Found: true, Unread: []string{"x"}}, []DistrustedCA{leaked}, true, false, []string{"WARNING"}},
		{"some read, the rest encrypted", SnapshotCAs{Found: true, CAs: held(active).CAs, Unread: []string{"x"}}, []DistrustedCA{leaked}, false, false, nil},
		{"no certapi keys in the snapshot", SnapshotCAs{}, []DistrustedCA{leaked}, false, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sources []string
			if tc.distrusted != nil {
				sources = []string{"/backup/distrusted-cas.json"}
			}
			v := decideDistrusted(tc.held, tc.distrusted, sources, tc.allow)
			if v.Refuse != tc.refuse {
				t.Errorf("refuse = %v, want %v (%s)", v.Refuse, tc.refuse, v.Message)
			}
			for _, w := range tc.says {
				if !strings.Contains(v.Message, w) {
					t.Errorf("message %q does not say %q", v.Message, w)
				}
			}
		})
	}
}
