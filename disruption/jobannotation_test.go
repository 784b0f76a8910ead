package disruption

import (
	"context"
	"maps"

	"testing"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/runner-guard/runner-guard/internal/jobannotation"
	"github.com/runner-guard/runner-guard/test/fixture"
)

// jobSecret signs the job annotations of these tests.
const jobSecret = "s"

// annotatedJob is the job a delivery records on the pod.
func annotatedJob() jobannotation.Job {
	return jobannotation.Job{Repository: "acme/app", RunID: 1, Attempt: 1, JobID: 9, Name: "build"}
}

// ourHints are the hints the reconciler sets, and owns, on a busy runner's pod.
func ourHints() map[string]string {
	return map[string]string{AnnotationDoNotDisrupt: "true", AnnotationSafeToEvict: "false", AnnotationOwned: "do-not-disrupt,safe-to-evict"}
}

// guardedLegacyPod is a running legacy runner pod of acme the guard stub guards.
func guardedLegacyPod() *corev1.Pod {
	pod := fixture.MakeLegacyRunnerPod("ci", "r-1").Org("acme").Running().Obj()
	pod.Labels["runner"] = "true" // the guard stub's runner pods
	return pod
}

// completeJob removes the pod's job annotation, as the completed delivery does.
func completeJob(t *testing.T, cl client.Client, pod *corev1.Pod) {
	t.Helper()
	if err := cl.Patch(context.Background(), pod, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+jobannotation.Annotation+`":null}}}`))); err != nil {
		t.Fatal(err)
	}
}

// The hint reconciler on a legacy pod with events on: a verified job
// annotation sets the hints with no listing, its removal (the job's
// completed) takes them off, a forged or copied one is ignored, and a pod
// never seen with one keeps its hints as without events.
func TestHintReconcilerFollowsJobAnnotation(t *testing.T) {
	secret, job, ours, none := jobSecret, annotatedJob(), ourHints(), map[string]string{}
	signed := func(uid string) string {
		return fixture.JobAnnotation(t, secret, job, jobannotation.StateInProgress, uid)
	}
	cases := map[string]struct {
		annotation func(uid string) string
		secret     string
		// hints the pod carries before; completed removes the annotation
		// after a first reconcile.
		hints     map[string]string
		completed bool
		want      map[string]string
	}{
		"signed job: hints set": {annotation: signed, secret: secret, want: ours},
		"forged mac: nothing": {annotation: func(uid string) string {
			return fixture.JobAnnotation(t, "guess", job, jobannotation.StateInProgress, uid)
		}, secret: secret, want: none},
		"copied from another pod: nothing": {annotation: func(string) string {
			return fixture.JobAnnotation(t, secret, job, jobannotation.StateInProgress, "other-uid")
		}, secret: secret, want: none},
		"completed: ours go":                    {annotation: signed, secret: secret, completed: true, want: none},
		"never annotated: hints stay as before": {secret: secret, hints: ours, want: ours},
		"events off: the annotation is nothing": {annotation: signed, want: none},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			pod := guardedLegacyPod()
			pod.Annotations = maps.Clone(c.hints)
			if c.annotation != nil {
				pod.Annotations = map[string]string{jobannotation.Annotation: c.annotation(string(pod.UID))}
			}
			cl := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(pod).Build()
			r := &hintReconciler{pods: cl, guard: &guardStub{}, enabled: []Hint{DoNotDisrupt, SafeToEvict}, jobKeys: fixture.JobKeys(t, c.secret)}
			hints := hintsAfterReconcile(t, r, cl, pod)
			if c.completed {
				if !maps.Equal(hints, ours) {
					t.Fatalf("hints before completed %v, want %v", hints, ours)
				}
				completeJob(t, cl, pod)
				hints = hintsAfterReconcile(t, r, cl, pod)
			}
			if !maps.Equal(hints, c.want) {
				t.Errorf("hints %v, want %v", hints, c.want)
			}
		})
	}
}

// hintsAfterReconcile reconciles pod once and returns the hint annotations
// it then carries.
func hintsAfterReconcile(t *testing.T, r *hintReconciler, cl client.Client, pod *corev1.Pod) map[string]string {
	t.Helper()
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}}); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Pod{}
	if err := cl.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	hints := map[string]string{}
	for _, k := range []string{AnnotationDoNotDisrupt, AnnotationSafeToEvict, AnnotationOwned} {
		if v, ok := got.Annotations[k]; ok {
			hints[k] = v
		}
	}
	return hints
}

// A listing taken while the job ran still shows the runner busy after the
// job's completed: it does not bring back the hints the completed took off
// (they would keep the node from Karpenter until they went stale). A listing
// taken after the completed that shows the runner busy (a new job of a runner
// that is not ephemeral) sets them again.
func TestJobAnnotationCompletedOutranksAnOlderListing(t *testing.T) {
	ours, pod := ourHints(), guardedLegacyPod()
	pod.Annotations = map[string]string{jobannotation.Annotation: fixture.JobAnnotation(t, jobSecret, annotatedJob(), jobannotation.StateInProgress, string(pod.UID))}
	cl := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(pod).Build()
	now := time.Unix(10_000, 0)
	l := &listingStub{busy: map[string]bool{"r-1": true}}
	l.take("acme", now.Add(-time.Second)) // guardStub's scope, while the job ran
	r := &hintReconciler{pods: cl, guard: &guardStub{}, listing: l, enabled: []Hint{DoNotDisrupt, SafeToEvict},
		jobKeys: fixture.JobKeys(t, jobSecret), now: func() time.Time { return now }}

	if hints := hintsAfterReconcile(t, r, cl, pod); !maps.Equal(hints, ours) {
		t.Fatalf("job annotated: hints %v, want %v", hints, ours)
	}
	completeJob(t, cl, pod)
	// The completed's own reconcile, then the one its hint patch triggers.
	for i := range 2 {
		if hints := hintsAfterReconcile(t, r, cl, pod); len(hints) != 0 {
			t.Fatalf("reconcile %d after completed, with a listing older than it: hints %v, want none", i+1, hints)
		}
	}
	l.take("acme", now.Add(time.Second))
	if hints := hintsAfterReconcile(t, r, cl, pod); !maps.Equal(hints, ours) {
		t.Errorf("a listing newer than the completed shows the runner busy: hints %v, want %v", hints, ours)
	}
}

// A released runner's pod keeps no job hold, and a verified in_progress
// record becomes its job's completed rather than going: a replay of the
// job's in_progress delivery is then stale, so it cannot hold the pod
// again while the pod waits for its eviction. What this replica cannot
// verify goes; a completed record stays as it is.
func TestDropJobHoldLeavesATombstone(t *testing.T) {
	job := annotatedJob()
	now := time.Unix(1_900_000_000, 0)
	cases := map[string]struct {
		annotation   func(uid string) string
		wantFound    bool
		wantVerified bool // a verified completed record of job, At now
		wantSame     bool // the annotation is unchanged
	}{
		"verified in_progress becomes completed": {
			annotation: func(uid string) string {
				return fixture.JobAnnotation(t, jobSecret, job, jobannotation.StateInProgress, uid)
			},
			wantFound: true, wantVerified: true,
		},
		"completed stays": {
			annotation: func(uid string) string {
				return fixture.JobAnnotation(t, jobSecret, job, jobannotation.StateCompleted, uid)
			},
			wantFound: true, wantSame: true,
		},
		"forged goes": {
			annotation: func(uid string) string {
				return fixture.JobAnnotation(t, "guess", job, jobannotation.StateInProgress, uid)
			},
		},
		"copied from another pod goes": {
			annotation: func(string) string {
				return fixture.JobAnnotation(t, jobSecret, job, jobannotation.StateInProgress, "other-uid")
			},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			pod := guardedLegacyPod()
			before := c.annotation(string(pod.UID))
			pod.Annotations = map[string]string{jobannotation.Annotation: before}
			cl := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(pod).Build()
			keys := fixture.JobKeys(t, jobSecret)
			r := &drainReconciler{cached: cl, live: cl, jobKeys: keys, now: func() time.Time { return now }, log: logr.Discard()}

			r.dropJobHold(context.Background(), pod)

			var got corev1.Pod
			if err := cl.Get(context.Background(), client.ObjectKeyFromObject(pod), &got); err != nil {
				t.Fatal(err)
			}
			after, found := got.Annotations[jobannotation.Annotation]
			if found != c.wantFound {
				t.Fatalf("annotation found %v (%q), want %v", found, after, c.wantFound)
			}
			if c.wantSame && after != before {
				t.Errorf("annotation rewritten: %q, want %q", after, before)
			}
			if _, held := keys.JobFromPod(&got); held {
				t.Error("the released runner's pod still holds a job")
			}
			if !c.wantVerified {
				return
			}
			cur, err := keys.Read(&got)
			if err != nil {
				t.Fatalf("the tombstone does not verify: %v", err)
			}
			if cur.JobID != job.JobID || cur.State != jobannotation.StateCompleted || !cur.At.Equal(now) {
				t.Errorf("tombstone %+v, want job %d completed at %s", cur, job.JobID, now)
			}
			replay := jobannotation.Record{Job: job, State: jobannotation.StateInProgress, At: time.Unix(1_800_000_000, 0)}
			if jobannotation.Supersedes(replay, cur, true) {
				t.Error("a replay of the job's in_progress supersedes the tombstone")
			}
		})
	}
}
