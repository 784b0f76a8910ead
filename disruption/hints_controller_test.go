package disruption

import (
	"context"
	"maps"
	"testing"

	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// The hint reconciler on a scale-set pod: hints follow its EphemeralRunner's
// job fields and phase, read through arc.Resolver, and a pod whose owner is
// borrowed or unreadable is left as it is.
func TestHintReconcilerFollowsEphemeralRunner(t *testing.T) {
	ours := map[string]string{AnnotationDoNotDisrupt: "true", AnnotationSafeToEvict: "false", AnnotationOwned: "do-not-disrupt,safe-to-evict"}
	cases := map[string]struct {
		edit        func(*fixture.EphemeralRunnerWrapper)
		annotations map[string]string
		podDone     bool
		want        map[string]string
	}{
		"job fields set: hints set": {
			edit: func(w *fixture.EphemeralRunnerWrapper) { w.JobID("7") }, want: ours,
		},
		"no job fields: nothing": {
			want: map[string]string{},
		},
		"job done: ours removed": {
			edit:        func(w *fixture.EphemeralRunnerWrapper) { w.JobID("7").Phase("Succeeded") },
			annotations: ours, want: map[string]string{},
		},
		"pod completed: ours removed, the user's kept": {
			edit:        func(w *fixture.EphemeralRunnerWrapper) { w.JobID("7") },
			annotations: map[string]string{AnnotationDoNotDisrupt: "false", AnnotationSafeToEvict: "false", AnnotationOwned: "safe-to-evict"},
			podDone:     true, want: map[string]string{AnnotationDoNotDisrupt: "false"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			w := fixture.MakeEphemeralRunner("ci", "r-1").ConfigURL("https://github.com/acme").RunnerID(5).RunnerName("r-1")
			if c.edit != nil {
				c.edit(w)
			}
			pw := fixture.MakeScaleSetRunnerPod("ci", "r-1").OwnedByEphemeralRunner(w)
			if !c.podDone {
				pw = pw.Running()
			}
			pod := pw.Obj()
			pod.Annotations = maps.Clone(c.annotations)
			cl := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(w.Obj(), pod).Build()
			r := &hintReconciler{pods: cl, guard: &guardStub{}, ephemeral: arc.NewResolver(arc.Options{Reader: cl}), enabled: []Hint{DoNotDisrupt, SafeToEvict}}
			pod.Labels["runner"] = "true" // the guard stub's runner pods
			if err := cl.Update(context.Background(), pod); err != nil {
				t.Fatal(err)
			}
			if hints := hintsAfterReconcile(t, r, cl, pod); !maps.Equal(hints, c.want) {
				t.Errorf("hints %v, want %v", hints, c.want)
			}
		})
	}
}
