package erasure

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
	"github.com/certapi/certapi/pkg/signer"
	"github.com/certapi/certapi/pkg/snapshot"
)

// due reports whether the history of the last completed distrust is still to be erased: status.distrust
// says it completed, and no HistoryErased condition settled it (Erased, or left to the operator of an
// external etcd) at or after its completion. Both live in the CertificateAuthority's status, so a new
// leader redoes an erasure its predecessor did not finish, and never one it did. A pure function.
func due(st certapiv1alpha1.CertificateAuthorityStatus) bool {
	d := st.Distrust
	if d == nil || d.CompletedAt == nil {
		return false
	}
	c := meta.FindStatusCondition(st.Conditions, certapiv1alpha1.ConditionHistoryErased)
	if c == nil || c.LastTransitionTime.Before(d.CompletedAt) {
		return true
	}
	return c.Reason != certapiv1alpha1.HistoryErasedReasonErased && c.Reason != certapiv1alpha1.HistoryErasedReasonExternalEtcd
}

// condition is the HistoryErased condition that tells what erasing the history of the completed distrust
// d came to (out, or err when it failed). Its lastTransitionTime is now, and never before d's
// completedAt, so that due finds a settled erasure settled even when this leader's clock is behind the
// one that completed the distrust. A pure function.
func condition(d *certapiv1alpha1.DistrustStatus, out Outcome, err error, generation int64, now time.Time) metav1.Condition {
	at := metav1.NewTime(now).Rfc3339Copy()
	if d.CompletedAt != nil && at.Before(d.CompletedAt) {
		at = *d.CompletedAt
	}
	c := metav1.Condition{Type: certapiv1alpha1.ConditionHistoryErased, ObservedGeneration: generation, LastTransitionTime: at}
	switch {
	case err != nil:
		c.Status, c.Reason = metav1.ConditionFalse, certapiv1alpha1.HistoryErasedReasonFailed
		c.Message = fmt.Sprintf("distrust %q completed, but erasing etcd's history and the snapshots taken before failed and is tried again: %v", d.Distrust, err)
	case out.External:
		c.Status, c.Reason = metav1.ConditionFalse, certapiv1alpha1.HistoryErasedReasonExternalEtcd
		c.Message = fmt.Sprintf("distrust %q completed; certapi stores in an etcd it does not own (--etcd-servers) and neither compacts nor defragments it: "+
			"etcd's history, its snapshots and backups taken before still hold the distrusted CAs' keys. Compact it at revision %d or later and defragment "+
			"every member (etcdctl compact %d --physical; etcdctl defrag --cluster), then delete the snapshots and backups taken before", d.Distrust, out.Revision, out.Revision)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, certapiv1alpha1.HistoryErasedReasonErased
		c.Message = fmt.Sprintf("distrust %q completed; certapi compacted its etcd at revision %d and defragmented %s", d.Distrust, out.Revision, members(out.Defragmented))
		switch {
		case out.Snapshot != "":
			c.Message += fmt.Sprintf("; took the snapshot %s and removed %s taken before", out.Snapshot, snapshots(len(out.Removed)))
		default:
			c.Message += "; no scheduled snapshots are configured"
		}
		c.Message += ". Backups copied elsewhere still hold the distrusted CAs' keys"
	}
	if len(c.Message) > maxMessage {
		c.Message = c.Message[:maxMessage-3] + "..."
	}
	return c
}

// maxMessage bounds the condition's message (and the Event's note, events.k8s.io allows 1 KiB).
const maxMessage = 1000

func members(eps []string) string {
	if len(eps) == 1 {
		return "its member"
	}
	return fmt.Sprintf("its %d members (%s)", len(eps), strings.Join(eps, ", "))
}

func snapshots(n int) string {
	if n == 1 {
		return "1 scheduled snapshot"
	}
	return fmt.Sprintf("%d scheduled snapshots", n)
}

// distrustedRecord returns the record of distrusted CAs with the CAs of the distrust in st added or brought
// up to date, and whether it changed. Each CA is named by its serial number and subject key ID (status'
// distrust.distrusted) and, while it is still in status' caBundle (the distrust is pending), by the
// SHA-256 fingerprint of its certificate; when it was distrusted is the distrust's startedAt, and
// completedAt is added once the distrust completes. Entries of earlier distrusts are kept: a restore must
// refuse every CA ever distrusted. A pure function.
func distrustedRecord(existing []snapshot.DistrustedCA, st certapiv1alpha1.CertificateAuthorityStatus) ([]snapshot.DistrustedCA, bool) {
	d := st.Distrust
	if d == nil || len(d.Distrusted) == 0 {
		return existing, false
	}
	fingerprints := map[string]string{}
	if certs, err := signer.ParseBundle([]byte(st.CABundle)); err == nil {
		for _, c := range certs {
			sum := sha256.Sum256(c.Raw)
			fingerprints[refKey(signer.FormatSerialNumber(c.SerialNumber), signer.FormatKeyID(c.SubjectKeyId))] = hex.EncodeToString(sum[:])
		}
	}
	var completed *time.Time
	if d.CompletedAt != nil {
		t := d.CompletedAt.UTC()
		completed = &t
	}
	out := slices.Clone(existing)
	changed := false
	for _, ref := range d.Distrusted {
		key := refKey(ref.SerialNumber, ref.SubjectKeyID)
		i := slices.IndexFunc(out, func(e snapshot.DistrustedCA) bool { return refKey(e.SerialNumber, e.SubjectKeyID) == key })
		if i < 0 {
			out = append(out, snapshot.DistrustedCA{SerialNumber: ref.SerialNumber, SubjectKeyID: ref.SubjectKeyID, SHA256Fingerprint: fingerprints[key],
				Distrust: d.Distrust, DistrustedAt: d.StartedAt.UTC(), CompletedAt: completed})
			changed = true
			continue
		}
		// The first distrust of a CA is the one recorded; a later one that lists it again only fills in
		// what was missing.
		if out[i].SHA256Fingerprint == "" && fingerprints[key] != "" {
			out[i].SHA256Fingerprint, changed = fingerprints[key], true
		}
		if out[i].CompletedAt == nil && completed != nil && out[i].Distrust == d.Distrust {
			out[i].CompletedAt, changed = completed, true
		}
	}
	return out, changed
}

func refKey(serial, ski string) string { return strings.ToLower(serial) + "/" + strings.ToLower(ski) }
