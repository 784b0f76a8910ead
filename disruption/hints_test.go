package disruption

import (
	"maps"
	"testing"
)

// apply applies a patch to annotations, as the API server's merge patch does.
func apply(annotations map[string]string, p HintPatch) map[string]string {
	out := maps.Clone(annotations)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range p {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = *v
		}
	}
	return out
}

func TestHintPatch(t *testing.T) {
	both := []Hint{DoNotDisrupt, SafeToEvict}
	all := AllHints()
	busyCost := map[string]string{AnnotationDeletionCost: DeletionCost.Value, AnnotationOwned: "deletion-cost"}
	idleCost := map[string]string{AnnotationDeletionCost: DeletionCost.Idle, AnnotationOwned: "deletion-cost"}
	ours := map[string]string{AnnotationDoNotDisrupt: "true", AnnotationSafeToEvict: "false", AnnotationOwned: "do-not-disrupt,safe-to-evict"}
	cases := map[string]struct {
		annotations map[string]string
		busy, idle  bool
		enabled     []Hint
		want        map[string]string // annotations after the patch
		noPatch     bool
	}{
		"busy, nothing set: both set and owned": {
			busy: true, enabled: both, want: ours,
		},
		"busy, already ours: no patch": {
			annotations: ours, busy: true, enabled: both, want: ours, noPatch: true,
		},
		"job ended: ours removed, ownership too": {
			annotations: ours, busy: false, enabled: both, want: map[string]string{},
		},
		"idle, nothing set: no patch": {
			busy: false, enabled: both, want: map[string]string{}, noPatch: true,
		},
		"busy, the user's own do-not-disrupt: kept, not owned; safe-to-evict ours": {
			annotations: map[string]string{AnnotationDoNotDisrupt: "false"}, busy: true, enabled: both,
			want: map[string]string{AnnotationDoNotDisrupt: "false", AnnotationSafeToEvict: "false", AnnotationOwned: "safe-to-evict"},
		},
		"job ended, the user's own values: untouched": {
			annotations: map[string]string{AnnotationDoNotDisrupt: "true", AnnotationSafeToEvict: "false"}, busy: false, enabled: both,
			want: map[string]string{AnnotationDoNotDisrupt: "true", AnnotationSafeToEvict: "false"}, noPatch: true,
		},
		"job ended, the user changed our value since: kept, disowned": {
			annotations: map[string]string{AnnotationDoNotDisrupt: "30m", AnnotationSafeToEvict: "false", AnnotationOwned: "do-not-disrupt,safe-to-evict"},
			busy:        false, enabled: both,
			want: map[string]string{AnnotationDoNotDisrupt: "30m"},
		},
		"busy, the user changed our value: kept, disowned": {
			annotations: map[string]string{AnnotationDoNotDisrupt: "30m", AnnotationSafeToEvict: "false", AnnotationOwned: "do-not-disrupt,safe-to-evict"},
			busy:        true, enabled: both,
			want: map[string]string{AnnotationDoNotDisrupt: "30m", AnnotationSafeToEvict: "false", AnnotationOwned: "safe-to-evict"},
		},
		"busy, do-not-disrupt turned off: only safe-to-evict": {
			busy: true, enabled: []Hint{SafeToEvict},
			want: map[string]string{AnnotationSafeToEvict: "false", AnnotationOwned: "safe-to-evict"},
		},
		"busy, a hint turned off after it was set: ours removed": {
			annotations: ours, busy: true, enabled: []Hint{DoNotDisrupt},
			want: map[string]string{AnnotationDoNotDisrupt: "true", AnnotationOwned: "do-not-disrupt"},
		},
		"busy, every hint off: nothing set": {
			busy: true, enabled: nil, want: map[string]string{}, noPatch: true,
		},
		"owned key removed by someone while busy: set again": {
			annotations: map[string]string{AnnotationSafeToEvict: "false", AnnotationOwned: "do-not-disrupt,safe-to-evict"},
			busy:        true, enabled: both, want: ours,
		},
		"an unknown name in the ownership list survives": {
			annotations: map[string]string{AnnotationOwned: "future-hint"}, busy: false, enabled: both,
			want: map[string]string{AnnotationOwned: "future-hint"}, noPatch: true,
		},
		"deletion cost, idle: the low one": {
			idle: true, enabled: []Hint{DeletionCost}, want: idleCost,
		},
		"deletion cost, idle turns busy: the high one, still owned": {
			annotations: idleCost, busy: true, enabled: []Hint{DeletionCost}, want: busyCost,
		},
		"deletion cost, busy turns idle: the low one": {
			annotations: busyCost, idle: true, enabled: []Hint{DeletionCost}, want: idleCost,
		},
		"deletion cost, job ended: ours removed": {
			annotations: busyCost, enabled: []Hint{DeletionCost}, want: map[string]string{},
		},
		"deletion cost, the user's value: never touched, busy or idle": {
			annotations: map[string]string{AnnotationDeletionCost: "5"}, busy: true, enabled: all,
			want: map[string]string{AnnotationDeletionCost: "5", AnnotationDoNotDisrupt: "true", AnnotationSafeToEvict: "false", AnnotationOwned: "do-not-disrupt,safe-to-evict"},
		},
		"deletion cost, the user changed ours: kept, disowned": {
			annotations: map[string]string{AnnotationDeletionCost: "7", AnnotationOwned: "deletion-cost"}, idle: true, enabled: all,
			want: map[string]string{AnnotationDeletionCost: "7"},
		},
		"deletion cost turned off: ours removed": {
			annotations: idleCost, idle: true, enabled: both, want: map[string]string{},
		},
		"idle: the busy-only hints go, the deletion cost stays low": {
			annotations: map[string]string{AnnotationDoNotDisrupt: "true", AnnotationSafeToEvict: "false", AnnotationDeletionCost: DeletionCost.Value, AnnotationOwned: "do-not-disrupt,safe-to-evict,deletion-cost"},
			idle:        true, enabled: all, want: idleCost,
		},
		"other annotations are never touched": {
			annotations: map[string]string{"team": "ci"}, busy: true, enabled: both,
			want: map[string]string{"team": "ci", AnnotationDoNotDisrupt: "true", AnnotationSafeToEvict: "false", AnnotationOwned: "do-not-disrupt,safe-to-evict"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			p := hintPatch(c.annotations, c.busy, c.idle, c.enabled)
			if c.noPatch != (len(p) == 0) {
				t.Errorf("patch %v, want empty: %v", p, c.noPatch)
			}
			if got := apply(c.annotations, p); !maps.Equal(got, c.want) {
				t.Errorf("annotations after the patch %v, want %v", got, c.want)
			}
			// A second pass on the result changes nothing: the controller settles.
			if again := hintPatch(apply(c.annotations, p), c.busy, c.idle, c.enabled); len(again) != 0 {
				t.Errorf("second patch %v, want none", again)
			}
		})
	}
}

func TestMergePatchNamesOnlyAnnotations(t *testing.T) {
	body := HintPatch{AnnotationDoNotDisrupt: ptr("true"), AnnotationOwned: nil}.mergePatch("42", nil)
	meta := body["metadata"].(map[string]any)
	if len(body) != 1 || len(meta) != 2 || meta["resourceVersion"] != "42" {
		t.Fatalf("patch %v, want metadata.annotations and metadata.resourceVersion only", body)
	}
	ann := meta["annotations"].(map[string]any)
	if v, ok := ann[AnnotationOwned]; !ok || v != nil {
		t.Errorf("removed key %v, want an explicit null", ann)
	}
}
