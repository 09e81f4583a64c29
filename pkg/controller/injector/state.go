package injector

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	certapiv1alpha1 "github.com/certapi/certapi/pkg/apis/certapi/v1alpha1"
)

// Reasons, in Problems and in Events.
const (
	// ReasonClaimedByAnotherInjector: the object also carries another injector's annotation.
	ReasonClaimedByAnotherInjector = "ClaimedByAnotherInjector"
	// ReasonCABundleOverwritten: another writer keeps overwriting the caBundle.
	ReasonCABundleOverwritten = "CABundleOverwritten"
	// ReasonNothingToInject: the object opts in but has no caBundle to keep (url webhooks only, a CRD
	// without webhook conversion, a local or insecure APIService).
	ReasonNothingToInject = "NothingToInject"
	// ReasonInjectionFailed: reading or writing the object failed. A transient failure (StatePending) is
	// retried with backoff; a write kube-apiserver refused (StateFailed) is tried again when the object
	// or the bundle changes, and is the reason of the Warning Event on the object.
	ReasonInjectionFailed = "InjectionFailed"
	// ReasonWaitingForBundle: the BundleSource has no bundle yet.
	ReasonWaitingForBundle = "WaitingForBundle"
	// ReasonInvalidBundle: the BundleSource's bundle does not parse; nothing is written.
	ReasonInvalidBundle = "InvalidBundle"
)

// State is where one target stands.
type State string

// States.
const (
	// StatePending: not yet up to date (being written, waiting for a bundle, or failing).
	StatePending State = "Pending"
	// StateUpToDate: every caBundle of the object holds the current bundle.
	StateUpToDate State = "UpToDate"
	// StateSkipped: the object opts in but has nothing to inject.
	StateSkipped State = "Skipped"
	// StateConflict: certapi refuses to manage the object (another injector or kube-controller-manager
	// claims it, or another writer keeps overwriting it).
	StateConflict State = "Conflict"
	// StateFailed: kube-apiserver refused the write with an error that retrying cannot fix (see
	// cabundle.Classify). Like a conflict it does not hold the rotation gate: one tenant's object that
	// can never take the bundle must not stop every rotation. It is tried again when the object or the
	// bundle changes, never on a timer.
	StateFailed State = "Failed"
)

// maxNamedFailed bounds InjectionSummary.FailedTargets.
const maxNamedFailed = 10

// Problem is one target that is not simply up to date, and why.
type Problem struct {
	Kind    Kind
	Name    string
	State   State
	Reason  string
	Message string
}

// Summary counts the targets (the objects that opt in) by state. Targets = UpToDate + Skipped +
// Conflicts + Failed + Pending.
type Summary struct {
	Targets   int
	UpToDate  int
	Skipped   int
	Conflicts int
	Failed    int
	Pending   int
	// Problems lists every target that is skipped, in conflict, failed, or pending for a known reason,
	// sorted by kind (in Kinds order) and name.
	Problems []Problem
}

// InjectionSummary is s as CertificateAuthority status.injection.
func (s Summary) InjectionSummary() *certapiv1alpha1.InjectionSummary {
	out := &certapiv1alpha1.InjectionSummary{
		Targets:   int32(s.Targets),
		UpToDate:  int32(s.UpToDate),
		Skipped:   int32(s.Skipped),
		Conflicts: int32(s.Conflicts),
		Failed:    int32(s.Failed),
	}
	for _, p := range s.Problems {
		if p.State == StateFailed && len(out.FailedTargets) < maxNamedFailed {
			out.FailedTargets = append(out.FailedTargets, string(p.Kind)+" "+p.Name)
		}
	}
	return out
}

// key names one object: by name, or "<namespace>/<name>" for a namespaced kind (see kindSpec).
type key struct {
	kind Kind
	name string
}

// objState is what the injector keeps per target.
type objState struct {
	state   State
	reason  string
	message string
	// obs is the last full observation.
	obs *observation
	// held maps each slot name to what certapi last saw the slot hold while up to date, or wrote.
	held map[string]heldSlot
	// bundle is the digest of the bundle the object was up to date with (StateUpToDate): after the
	// Source's bundle changes, Summary counts the object as pending until it has been re-checked.
	bundle digest
	// certs is the digest of the set of certificates in that bundle (see canonicalBundle.certs): a
	// bundle that only changes order (the switch makes Next Active) trusts the same CAs, and Summary
	// keeps counting the object as up to date while it is re-written.
	certs digest
	// refused, for StateFailed, is the write kube-apiserver refused: the object's resourceVersion and
	// the bundle then. The same pair is not tried again.
	refused refusedWrite
	// restorations are the times certapi restored an overwritten caBundle, within fightWindow.
	restorations []time.Time
	// foughtUntil ends the cool-down of a fought-over object; foughtAnnotations is its annotations'
	// fingerprint then (a change ends the cool-down early).
	foughtUntil       time.Time
	foughtAnnotations string
	// warned is the message of the last Warning Event, so that retries do not repeat it.
	warned string
	// told is the message of the last KeepingForeignCA Event, likewise.
	told string
}

// refusedWrite is a write refused for good: against which object version, with which bundle.
type refusedWrite struct {
	resourceVersion string
	bundle          digest
}

// refusedFor reports whether a Failed target's refusal still stands for the object at resourceVersion rv
// and the bundle with digest d: neither changed since, so trying again would be refused again, and the
// target does not hold the rotation gate.
func (st *objState) refusedFor(rv string, d digest) bool {
	return st.state == StateFailed && st.refused.resourceVersion == rv && st.refused.bundle == d
}

// observed returns k's last observation and a copy of its held digests.
func (i *Injector) observed(k key) (*observation, map[string]heldSlot) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.objects[k]
	if st == nil {
		return nil, nil
	}
	held := make(map[string]heldSlot, len(st.held))
	for n, d := range st.held {
		held[n] = d
	}
	return st.obs, held
}

// state returns k's state, made if missing; i.mu must be held.
func (i *Injector) state(k key) *objState {
	st := i.objects[k]
	if st == nil {
		st = &objState{state: StatePending}
		i.objects[k] = st
	}
	return st
}

func (i *Injector) setObservation(k key, obs *observation) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.state(k).obs = obs
}

func (i *Injector) setPending(k key, reason, msg string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.state, st.reason, st.message, st.warned = StatePending, reason, msg, ""
}

// setFailed records a failed read or write (msg "" records nothing but that the object must be read
// again); obs, when not nil, is forgotten so the next try reads.
func (i *Injector) setFailed(k key, obs *observation, msg string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	if obs != nil && st.obs == obs {
		st.obs = nil
	}
	if msg != "" && st.state != StateConflict {
		st.state, st.reason, st.message = StatePending, ReasonInjectionFailed, msg
	}
}

// setRefused records a write that kube-apiserver refused for good (see cabundle.Classify) of the bundle
// with digest d into k at resourceVersion rv, and records a Warning Event, once per distinct message.
func (i *Injector) setRefused(k key, m *metav1.PartialObjectMetadata, rv string, d digest, msg string) {
	i.mu.Lock()
	st := i.state(k)
	st.state, st.reason, st.message = StateFailed, ReasonInjectionFailed, msg
	st.refused = refusedWrite{resourceVersion: rv, bundle: d}
	warn := st.warned != msg
	st.warned = msg
	i.mu.Unlock()
	if warn {
		i.recorder.Eventf(i.regarding(k, m), nil, corev1.EventTypeWarning, ReasonInjectionFailed, "InjectCABundle", "%s", msg)
	}
}

// stillRefused reports whether k failed for good at resourceVersion rv with the bundle d: nothing
// changed since, so it is not tried again.
func (i *Injector) stillRefused(k key, rv string, d digest) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.objects[k]
	return st != nil && st.refusedFor(rv, d)
}

func (i *Injector) setSkipped(k key, obs *observation, why string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.obs = obs
	st.state, st.reason, st.message, st.warned = StateSkipped, ReasonNothingToInject, fmt.Sprintf("nothing to inject into %s %s: %s", k.kind, k.name, why), ""
}

func (i *Injector) setUpToDate(k key, obs *observation, b canonicalBundle) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.obs = obs
	st.state, st.reason, st.message, st.warned = StateUpToDate, "", "", ""
	st.held = heldBy(obs, b.digest)
	st.bundle, st.certs = b.digest, b.certs
}

// setWritten records a successful write of the bundle b; obs is the patch response.
func (i *Injector) setWritten(k key, obs *observation, b canonicalBundle) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.obs = obs
	st.held = heldBy(obs, b.digest)
	if obs.holds(b.digest) {
		st.state, st.reason, st.message, st.warned = StateUpToDate, "", "", ""
		st.bundle, st.certs = b.digest, b.certs
	}
}

// heldBy maps the slots of obs that hold d (see observation.slotHolds) to d and what they hold.
func heldBy(obs *observation, d digest) map[string]heldSlot {
	held := make(map[string]heldSlot, len(obs.Slots))
	for _, s := range obs.Slots {
		if obs.slotHolds(s, d) {
			held[s.Name] = heldSlot{bundle: d, field: s.Digest}
		}
	}
	return held
}

// tellKept records a Normal Event naming the foreign CAs k keeps, once per distinct message; a target
// that keeps none clears the memory, so that keeping again is told again.
func (i *Injector) tellKept(k key, m *metav1.PartialObjectMetadata, kept []string) {
	msg := ""
	if len(kept) > 0 {
		msg = keptMessage(k.kind, k.name, kept)
	}
	i.mu.Lock()
	st := i.state(k)
	tell := msg != "" && st.told != msg
	st.told = msg
	i.mu.Unlock()
	if tell {
		i.recorder.Eventf(i.regarding(k, m), nil, corev1.EventTypeNormal, ReasonKeepingForeignCA, "InjectCABundle", "%s", msg)
	}
}

// setConflict marks k as in conflict and records a Warning Event, once per distinct message.
func (i *Injector) setConflict(k key, m *metav1.PartialObjectMetadata, reason, msg string) {
	i.mu.Lock()
	st := i.state(k)
	st.state, st.reason, st.message = StateConflict, reason, msg
	warn := st.warned != msg
	st.warned = msg
	i.mu.Unlock()
	if warn {
		i.recorder.Eventf(i.regarding(k, m), nil, corev1.EventTypeWarning, reason, "InjectCABundle", "%s", msg)
	}
}

// restoration counts one more restoration of an overwritten caBundle. When that would make more than
// fightLimit within fightWindow, the object goes into conflict for i.conflictCooldown instead, and
// restoration returns true: do not write.
func (i *Injector) restoration(k key, m *metav1.PartialObjectMetadata, obs *observation, p plan, now time.Time) bool {
	i.mu.Lock()
	st := i.state(k)
	kept := st.restorations[:0]
	for _, t := range st.restorations {
		if now.Sub(t) < fightWindow {
			kept = append(kept, t)
		}
	}
	st.restorations = kept
	if len(kept) < fightLimit {
		st.restorations = append(st.restorations, now)
		i.mu.Unlock()
		return false
	}
	st.restorations = nil
	st.foughtUntil = now.Add(i.conflictCooldown)
	st.foughtAnnotations = m.Annotations[annotationsHashKey]
	i.mu.Unlock()

	by := "another writer"
	if writers := overwrittenBy(obs, p.overwritten); len(writers) > 0 {
		by = fmt.Sprintf("field manager %q", writers[0])
		for _, w := range writers[1:] {
			by += fmt.Sprintf(", %q", w)
		}
	}
	msg := fmt.Sprintf("the caBundle of %s (%s) was overwritten %d times within %s, last by %s; certapi restored it %d times and now leaves it alone for %s "+
		"(or until an annotation of the object changes). Stop the other writer (for Argo CD: ignoreDifferences with managedFieldsManagers: [%s] and the RespectIgnoreDifferences=true sync option), "+
		"or remove annotation %s to let it own the caBundle.",
		k.name, strings.Join(p.overwritten, ", "), fightLimit+1, fightWindow, by, fightLimit, i.conflictCooldown, certapiv1alpha1.FieldManager, certapiv1alpha1.AnnotationInjectCABundle)
	i.setConflict(k, m, ReasonCABundleOverwritten, msg)
	return true
}

// coolingDown returns how long k, fought over, is still left alone; 0 when it is not (and then any
// cool-down that ended, or that an annotation change cut short, is cleared).
func (i *Injector) coolingDown(k key, m *metav1.PartialObjectMetadata, now time.Time) time.Duration {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	if st.foughtUntil.IsZero() {
		return 0
	}
	if wait := st.foughtUntil.Sub(now); wait > 0 && m.Annotations[annotationsHashKey] == st.foughtAnnotations {
		return wait
	}
	st.foughtUntil, st.foughtAnnotations = time.Time{}, ""
	st.state, st.reason, st.message, st.warned = StatePending, "", "", ""
	st.obs = nil // read afresh
	return 0
}

// regarding is the object an Event is about, by reference only.
func (i *Injector) regarding(k key, m *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: i.kinds[k.kind].apiVersion(), Kind: string(k.kind)},
		ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion},
	}
}

// forget drops k: it was deleted or no longer opts in.
func (i *Injector) forget(k key) {
	i.mu.Lock()
	delete(i.objects, k)
	i.mu.Unlock()
}

// Summary counts the targets by state and lists the problems. It is computed on each call from the
// injector's current view. An object up to date with an earlier bundle counts as pending, unless that
// bundle held the same certificates (only their order changed: it trusts what the current one does, and
// is being re-written); a Failed object whose refused write was of an earlier bundle counts as pending
// too (it is being tried with the current one).
func (i *Injector) Summary() Summary {
	cur := i.currentCanonical()
	i.mu.Lock()
	defer i.mu.Unlock()
	var s Summary
	for k, st := range i.objects {
		s.Targets++
		state := st.state
		switch st.state {
		case StateUpToDate:
			if st.bundle != cur.digest && (cur.pem == nil || st.certs != cur.certs) {
				s.Pending++ // up to date with a bundle that is no longer the Source's: not re-checked yet
				continue
			}
			s.UpToDate++
		case StateSkipped:
			s.Skipped++
		case StateConflict:
			s.Conflicts++
		case StateFailed:
			if st.refused.bundle != cur.digest {
				s.Pending++ // refused an earlier bundle; being tried with this one
				state = StatePending
				break
			}
			s.Failed++
		default:
			s.Pending++
		}
		if st.state != StateUpToDate && st.reason != "" {
			s.Problems = append(s.Problems, Problem{Kind: k.kind, Name: k.name, State: state, Reason: st.reason, Message: st.message})
		}
	}
	order := map[Kind]int{}
	for n, kind := range Kinds {
		order[kind] = n
	}
	sort.Slice(s.Problems, func(a, b int) bool {
		pa, pb := s.Problems[a], s.Problems[b]
		if pa.Kind != pb.Kind {
			return order[pa.Kind] < order[pb.Kind]
		}
		return pa.Name < pb.Name
	})
	return s
}

// AllHold reports whether every injectable target (one that opts in, is not skipped, not in conflict,
// and not Failed for this very bundle and object version) holds exactly bundle (compared in canonical
// form), as far as the informers have seen: the rotation gate. It is false before the informers have
// synced, while a target has not been read, and for a bundle that does not parse.
func (i *Injector) AllHold(bundle []byte) bool {
	c := i.canonical(bundle)
	if c.err != nil || !i.HasSynced() {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for k, st := range i.objects {
		if st.state == StateConflict {
			continue
		}
		m := i.meta(k)
		if m == nil || !optedIn(m) {
			continue // being forgotten
		}
		if st.refusedFor(m.ResourceVersion, c.digest) {
			continue // refused for good; reported, and tried again when it changes
		}
		if !st.obs.current(m.UID, m.ResourceVersion) {
			return false // changed since it was last read: not known to hold it
		}
		if st.state == StateSkipped && st.obs.Skip != "" {
			continue
		}
		if !st.obs.holds(c.digest) {
			return false
		}
	}
	return true
}
