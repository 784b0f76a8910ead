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
	// AnnotationDeletionCost orders a ReplicaSet's scale-down, and Karpenter's
	// Balanced consolidation weighs it (1 + cost/2^27, clamped to [-10, 10])
	// when it chooses between nodes.
	AnnotationDeletionCost = "controller.kubernetes.io/pod-deletion-cost"
)

// Hint is one annotation runner-guard can keep on a busy runner's pod.
type Hint struct {
	// Name is how AnnotationOwned lists it.
	Name string
	// Key and Value are the annotation set while a job runs.
	Key, Value string
	// Idle, when set, is the value kept while the pod's sources show no job
	// (JobNotProven); "" removes the hint then.
	Idle string
}

// The hints. DeletionCost's values are the extremes Karpenter's score
// tells apart (smaller ones change nothing there): an idle runner's node is
// the cheapest to consolidate, a busy one's the dearest.
var (
	DoNotDisrupt = Hint{Name: "do-not-disrupt", Key: AnnotationDoNotDisrupt, Value: "true"}
	SafeToEvict  = Hint{Name: "safe-to-evict", Key: AnnotationSafeToEvict, Value: "false"}
	DeletionCost = Hint{Name: "deletion-cost", Key: AnnotationDeletionCost, Value: "1000000000", Idle: "-1000000000"}
)

// AllHints are the hints in the order AnnotationOwned lists them.
func AllHints() []Hint { return []Hint{DoNotDisrupt, SafeToEvict, DeletionCost} }

// want is the value h should have (""; none) for a pod that is busy, idle
// (its sources show no job), or neither.
func (h Hint) want(busy, idle bool) string {
	switch {
	case busy:
		return h.Value
	case idle:
		return h.Idle
	}
	return ""
}

// set reports whether v is a value runner-guard sets for h.
func (h Hint) set(v string) bool { return v == h.Value || (h.Idle != "" && v == h.Idle) }

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

// HintPatch is a change of a pod's annotations (the hints brought in step
// with its job, or the drain ending a released runner's job record): the
// value to set for each key, nil to remove it. An empty patch changes
// nothing.
type HintPatch map[string]*string

// hintPatch computes, from a pod's annotations, whether its runner holds a
// job (busy) or its sources show none (idle; neither: unknown or ended) and
// which hints are enabled, the annotations to change:
//
//   - a hint enabled with a value wanted (Value when busy, Idle when idle):
//     set it whenever the pod does not carry its key, or carries another
//     value runner-guard sets, and record it in AnnotationOwned; a value
//     already there that runner-guard does not set (the user's) is left
//     alone and not owned;
//   - otherwise: remove a hint runner-guard owns while it still carries a
//     value runner-guard set; one changed since belongs to whoever changed
//     it and is kept, only disowned;
//   - an owned hint whose value someone changed is disowned too.
//
// It never changes a key it does not own.
func hintPatch(annotations map[string]string, busy, idle bool, enabled []Hint) HintPatch {
	patch := HintPatch{}
	had := owned(annotations)
	var keep []string
	for _, h := range AllHints() {
		v, present := annotations[h.Key]
		ours := slices.Contains(had, h.Name) && present && h.set(v)
		want := ""
		if slices.Contains(enabled, h) {
			want = h.want(busy, idle)
		}
		switch {
		case want != "" && ours && v == want:
			keep = append(keep, h.Name)
		case want != "" && (ours || !present):
			patch[h.Key] = ptr(want)
			keep = append(keep, h.Name)
		case ours:
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
// metadata.annotations (and of metadata.labels, the job budget's label),
// with the pod's resourceVersion as precondition.
func (p HintPatch) mergePatch(resourceVersion string, labels HintPatch) map[string]any {
	meta := map[string]any{"resourceVersion": resourceVersion, "annotations": p.values()}
	if len(labels) > 0 {
		meta["labels"] = labels.values()
	}
	return map[string]any{"metadata": meta}
}

// values is the patch as JSON merge patch values: nil removes a key.
func (p HintPatch) values() map[string]any {
	out := map[string]any{}
	for k, v := range p {
		if v == nil {
			out[k] = nil
		} else {
			out[k] = *v
		}
	}
	return out
}
