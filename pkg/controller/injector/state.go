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
	// ReasonInjectionFailed: reading or writing the object failed; it is retried with backoff.
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
	// StateConflict: certapi refuses to manage the object (another injector claims it, or another
	// writer keeps overwriting it).
	StateConflict State = "Conflict"
)

// Problem is one target that is not simply up to date, and why.
type Problem struct {
	Kind    Kind
	Name    string
	State   State
	Reason  string
	Message string
}

// Summary counts the targets (the objects that opt in) by state. Targets = UpToDate + Skipped +
// Conflicts + Pending.
type Summary struct {
	Targets   int
	UpToDate  int
	Skipped   int
	Conflicts int
	Pending   int
	// Problems lists every target that is skipped, in conflict, or pending for a known reason, sorted
	// by kind (in Kinds order) and name.
	Problems []Problem
}

// InjectionSummary is s as CertificateAuthority status.injection.
func (s Summary) InjectionSummary() *certapiv1alpha1.InjectionSummary {
	return &certapiv1alpha1.InjectionSummary{
		Targets:   int32(s.Targets),
		UpToDate:  int32(s.UpToDate),
		Skipped:   int32(s.Skipped),
		Conflicts: int32(s.Conflicts),
	}
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
	// held maps each slot name to the digest of the bundle certapi last saw the slot hold, or wrote.
	held map[string]digest
	// bundle is the digest of the bundle the object was up to date with (StateUpToDate): after the
	// Source's bundle changes, Summary counts the object as pending until it has been re-checked.
	bundle digest
	// restorations are the times certapi restored an overwritten caBundle, within fightWindow.
	restorations []time.Time
	// foughtUntil ends the cool-down of a fought-over object; foughtAnnotations is its annotations'
	// fingerprint then (a change ends the cool-down early).
	foughtUntil       time.Time
	foughtAnnotations string
	// warned is the message of the last Warning Event, so that retries do not repeat it.
	warned string
}

// observed returns k's last observation and a copy of its held digests.
func (i *Injector) observed(k key) (*observation, map[string]digest) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.objects[k]
	if st == nil {
		return nil, nil
	}
	held := make(map[string]digest, len(st.held))
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

func (i *Injector) setSkipped(k key, obs *observation, why string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.obs = obs
	st.state, st.reason, st.message, st.warned = StateSkipped, ReasonNothingToInject, fmt.Sprintf("nothing to inject into %s %s: %s", k.kind, k.name, why), ""
}

func (i *Injector) setUpToDate(k key, obs *observation, d digest) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.obs = obs
	st.state, st.reason, st.message, st.warned = StateUpToDate, "", "", ""
	st.held = heldBy(obs, d)
	st.bundle = d
}

// setWritten records a successful write of the bundle with digest d; obs is the patch response.
func (i *Injector) setWritten(k key, obs *observation, d digest) {
	i.mu.Lock()
	defer i.mu.Unlock()
	st := i.state(k)
	st.obs = obs
	st.held = heldBy(obs, d)
	if obs.holds(d) {
		st.state, st.reason, st.message, st.warned = StateUpToDate, "", "", ""
		st.bundle = d
	}
}

// heldBy maps the slots of obs that hold d to d.
func heldBy(obs *observation, d digest) map[string]digest {
	held := make(map[string]digest, len(obs.Slots))
	for _, s := range obs.Slots {
		if s.Digest == d {
			held[s.Name] = d
		}
	}
	return held
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
		k.name, strings.Join(p.overwritten, ", "), fightLimit+1, fightWindow, by, fightLimit, i.conflictCooldown, FieldManager, AnnotationInject)
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
// injector's current view; an object up to date with an earlier bundle counts as pending.
func (i *Injector) Summary() Summary {
	_, current, _ := i.currentBundle()
	i.mu.Lock()
	defer i.mu.Unlock()
	var s Summary
	for k, st := range i.objects {
		s.Targets++
		switch st.state {
		case StateUpToDate:
			if st.bundle != current {
				s.Pending++ // up to date with a bundle that is no longer the Source's: not re-checked yet
				continue
			}
			s.UpToDate++
		case StateSkipped:
			s.Skipped++
		case StateConflict:
			s.Conflicts++
		default:
			s.Pending++
		}
		if st.state != StateUpToDate && st.reason != "" {
			s.Problems = append(s.Problems, Problem{Kind: k.kind, Name: k.name, State: st.state, Reason: st.reason, Message: st.message})
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

// AllHold reports whether every injectable target (one that opts in, is not skipped and is not in
// conflict) holds exactly bundle (compared in canonical form), as far as the informers have seen: the
// rotation gate. It is false before the informers have synced, while a target has not been read, and
// for a bundle that does not parse.
func (i *Injector) AllHold(bundle []byte) bool {
	c := i.canonical(bundle)
	if c.err != nil {
		return false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if !i.synced {
		return false
	}
	for k, st := range i.objects {
		if st.state == StateConflict {
			continue
		}
		m := i.meta(k)
		if m == nil || !optedIn(m) {
			continue // being forgotten
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
