package disruption

import (
	"slices"
	"strings"
)

// The hints runner-guard keeps on a runner pod while its runner holds a job.
const (
	// AnnotationDoNotDisrupt keeps Karpenter from choosing the pod's node
	// for consolidation (and drift, without a terminationGracePeriod).
	AnnotationDoNotDisrupt = "karpenter.sh/do-not-disrupt"
	// AnnotationSafeToEvict "false" keeps the cluster autoscaler from
	// scaling the pod's node down.
	AnnotationSafeToEvict = "cluster-autoscaler.kubernetes.io/safe-to-evict"
	// AnnotationOwned lists the hints runner-guard set on the pod (comma
	// separated hint names): it removes only those, and only while they
	// still carry the value it set. A value anyone else set is theirs.
	AnnotationOwned = "runner-guard.io/hints"
)

// Hint is one annotation runner-guard can keep on a busy runner's pod.
type Hint struct {
	// Name is how AnnotationOwned lists it.
	Name string
	// Key and Value are the annotation set while a job runs.
	Key, Value string
}

// DoNotDisrupt and SafeToEvict are the two hints.
var (
	DoNotDisrupt = Hint{Name: "do-not-disrupt", Key: AnnotationDoNotDisrupt, Value: "true"}
	SafeToEvict  = Hint{Name: "safe-to-evict", Key: AnnotationSafeToEvict, Value: "false"}
)

// AllHints are the hints in the order AnnotationOwned lists them.
func AllHints() []Hint { return []Hint{DoNotDisrupt, SafeToEvict} }

// owned parses AnnotationOwned.
func owned(annotations map[string]string) []string {
	var out []string
	for _, n := range strings.Split(annotations[AnnotationOwned], ",") {
		if n = strings.TrimSpace(n); n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// HintPatch is the change of a pod's annotations that brings its hints in
// step with its job: the value to set for each key, nil to remove it. An
// empty patch changes nothing.
type HintPatch map[string]*string

// hintPatch computes, from a pod's annotations, whether its runner holds a
// job (busy) and which hints are enabled, the annotations to change:
//
//   - busy, hint enabled: set the hint whenever the pod does not carry its key,
//     and record it in AnnotationOwned; a value already there (the user's,
//     whatever it says) is left alone and not owned;
//   - otherwise: remove a hint runner-guard owns while it still carries the
//     value runner-guard set; one changed since belongs to whoever changed
//     it and is kept, only disowned;
//   - an owned hint whose value someone changed while busy is disowned too.
//
// It never changes a key it does not own.
func hintPatch(annotations map[string]string, busy bool, enabled []Hint) HintPatch {
	patch := HintPatch{}
	had := owned(annotations)
	var keep []string
	for _, h := range AllHints() {
		isOwned := slices.Contains(had, h.Name)
		v, present := annotations[h.Key]
		want := busy && slices.Contains(enabled, h)
		switch {
		case want && isOwned && present && v == h.Value:
			keep = append(keep, h.Name)
		case want && !present:
			patch[h.Key] = ptr(h.Value)
			keep = append(keep, h.Name)
		case isOwned && present && v == h.Value:
			// Not wanted any more (job over, or the hint turned off): ours to remove.
			patch[h.Key] = nil
		}
		// Every other case leaves the key as it is: absent, or someone else's.
	}
	// Names AnnotationOwned lists that runner-guard does not know are kept
	// as they are: a newer release may have written them.
	for _, n := range had {
		if !slices.ContainsFunc(AllHints(), func(h Hint) bool { return h.Name == n }) {
			keep = append(keep, n)
		}
	}
	if list := strings.Join(keep, ","); list != annotations[AnnotationOwned] {
		patch[AnnotationOwned] = nil
		if list != "" {
			patch[AnnotationOwned] = ptr(list)
		}
	}
	return patch
}

func ptr(s string) *string { return &s }

// mergePatch renders a HintPatch as a JSON merge patch body of
// metadata.annotations, with the pod's resourceVersion as precondition.
func (p HintPatch) mergePatch(resourceVersion string) map[string]any {
	ann := map[string]any{}
	for k, v := range p {
		if v == nil {
			ann[k] = nil
		} else {
			ann[k] = *v
		}
	}
	return map[string]any{"metadata": map[string]any{"resourceVersion": resourceVersion, "annotations": ann}}
}
