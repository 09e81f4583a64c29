package snapshot

import (
	"fmt"
	"strings"
)

// Verdict is what a restore does about one of its checks: go on, go on with a warning, or refuse.
type Verdict struct {
	// Refuse stops the restore before anything is changed; Message says why and which flag overrides.
	Refuse bool
	// Message is for the operator; empty when there is nothing to say.
	Message string
}

// decideIntegrity: a snapshot whose integrity record verifies is restored. With no key nothing can be
// checked: the restore goes on, saying so and how to check. A record that is missing, malformed, does not
// open or does not match refuses the restore, unless the operator accepts an unverified snapshot (one
// taken with plain etcdctl, or before certapi wrote records). A pure function.
func decideIntegrity(in Integrity, accept bool) Verdict {
	const flag = "--accept-unverified-snapshot"
	switch in.State {
	case IntegrityVerified:
		return Verdict{Message: fmt.Sprintf("Integrity verified: %s opens with the encryption configuration's key and matches the snapshot.", in.Record)}
	case IntegrityNoKey:
		return Verdict{Message: "WARNING: no integrity check: without --encryption-provider-config nothing tells a snapshot certapi wrote from one " +
			"crafted by whoever could write where it was kept. Give the --encryption-provider-config certapi runs with to check the snapshot's " +
			"integrity record (FILE" + IntegritySuffix + ", or --integrity-record)."}
	}
	var what string
	switch in.State {
	case IntegrityMissing:
		what = fmt.Sprintf("the snapshot has no integrity record (%s does not exist): taken with plain etcdctl, streamed to stdout, "+
			"taken before certapi wrote records, or its record was removed", in.Record)
	case IntegrityMalformed:
		what = fmt.Sprintf("the integrity record %s is not one certapi writes: %s", in.Record, in.Detail)
	case IntegrityUnopened:
		what = fmt.Sprintf("the integrity record %s is not valid: %s", in.Record, in.Detail)
	default:
		what = fmt.Sprintf("the snapshot does not match its integrity record %s: %s", in.Record, in.Detail)
	}
	if accept {
		return Verdict{Message: "WARNING: restoring an unverified snapshot (" + flag + "): " + what + "."}
	}
	return Verdict{Refuse: true, Message: "refusing to restore: " + what + ". Nothing was changed. Restore a snapshot certapi saved " +
		"with its integrity record, or give " + flag + " if you know where this one comes from (a snapshot taken with etcdctl or before this version)."}
}

// heldDistrusted returns the CAs of held that distrusted lists, each with its distrusted record's entry. A
// pure function.
func heldDistrusted(held []SnapshotCA, distrusted []DistrustedCA) []heldMatch {
	var out []heldMatch
	for _, h := range held {
		for _, d := range distrusted {
			if d.Same(h.DistrustedCA) {
				out = append(out, heldMatch{held: h, distrusted: d})
				break
			}
		}
	}
	return out
}

type heldMatch struct {
	held       SnapshotCA
	distrusted DistrustedCA
}

// decideDistrusted: a snapshot that holds a CA a distrust removed from trust is refused, naming each such
// CA and when it was distrusted, unless the operator allows it: restored, it would bring the CA's private
// key back. A snapshot whose CAs cannot be read at all (encrypted, and no key given) is refused too when
// any CA is known to be distrusted, as it cannot be told apart. With no record of distrusted CAs there is
// nothing to refuse; sources says where the restore looked, for the message. A pure function.
func decideDistrusted(held SnapshotCAs, distrusted []DistrustedCA, sources []string, allow bool) Verdict {
	const flag = "--allow-distrusted-cas"
	if len(distrusted) == 0 {
		where := "no record of distrusted CAs was found"
		if len(sources) > 0 {
			where = "the records of distrusted CAs (" + strings.Join(sources, ", ") + ") list none"
		}
		return Verdict{Message: "Distrusted CAs: " + where + "; give --distrusted-cas=FILE with your copy of " + DistrustedFileName + " to check against it."}
	}
	matches := heldDistrusted(held.CAs, distrusted)
	cannotTell := len(held.CAs) == 0 && len(held.Unread) > 0
	if len(matches) == 0 && !cannotTell {
		return Verdict{Message: fmt.Sprintf("Distrusted CAs: the snapshot holds none of the %d CAs listed in %s.", len(distrusted), strings.Join(sources, ", "))}
	}
	var what string
	if cannotTell {
		what = "the snapshot's CAs cannot be read (" + strings.Join(held.Unread, "; ") + "), so restore cannot tell whether it holds one of the " +
			fmt.Sprintf("%d distrusted CAs listed in %s; give the --encryption-provider-config certapi runs with", len(distrusted), strings.Join(sources, ", "))
	} else {
		var names []string
		for _, m := range matches {
			names = append(names, fmt.Sprintf("%s, held in %s", m.distrusted, m.held.In))
		}
		what = fmt.Sprintf("the snapshot holds %d CA(s) distrusted after it was taken: %s (listed in %s). Restored, it would bring back a "+
			"distrusted CA and its private key", len(matches), strings.Join(names, "; "), strings.Join(sources, ", "))
	}
	if allow {
		return Verdict{Message: "WARNING: restoring anyway (" + flag + "): " + what + ". Set spec.distrust again once certapi runs."}
	}
	return Verdict{Refuse: true, Message: "refusing to restore: " + what + ". Nothing was changed. Restore a snapshot taken after the distrust, or give " +
		flag + " (and distrust again at once) if you must."}
}
