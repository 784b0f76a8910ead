package webhook

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/fixture"
	"github.com/runner-guard/runner-guard/test/fixture/fakeclock"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

const testKarpenter = "system:serviceaccount:kube-system:karpenter"

// karpenterReview is Karpenter's DELETE of a busy scale-set runner's pod
// (its job fields say a job runs) with grace grace, on node n1 whose
// NodeClaim default-abc ends at deadline; it arrived at now.
func karpenterReview(now, deadline time.Time, grace *int64) review {
	pod := runningPod.DeepCopy()
	pod.Spec.NodeName = "n1"
	pod.Spec.TerminationGracePeriodSeconds = grace
	r := deleteOnPod
	r.Pod, r.Arrived = pod, now
	r.User = authenticationv1.UserInfo{Username: testKarpenter}
	r.Target = testTarget
	r.ARC = &arc.Runner{Kind: arc.Kind, Job: arc.Job{ID: "42", Repository: "acme/app"}}
	r.ARCJob = r.ARC.Job.String() // as the resolver sets it
	r.NodeDeadline = NodeDeadline{NodeClaim: "default-abc", At: deadline}
	return r
}

func TestRuleNodeDeadline(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	sec := func(i int64) *int64 { return &i }
	honoring := testPolicy(OnErrorDeny)
	honoring.HonorNodeDeadlines = true
	off := testPolicy(OnErrorDeny)
	passed := karpenterReview(now, now.Add(10*time.Second), sec(30)) // 20s past deadline less grace
	allowed := wantDecision{applies: true, allowed: true, reason: ReasonNodeDeadline, warning: true, event: EventNodeDeadline,
		msg: []string{"NodeClaim default-abc", "2026-12-06T12:00:10Z", "node n1", "(30s)", "recorded node-deadline"}}
	tests := map[string]struct {
		r    review
		p    policy
		want wantDecision
	}{
		"deadline passed":                        {passed, honoring, allowed},
		"deadline itself passed":                 {karpenterReview(now, now.Add(-time.Minute), sec(30)), honoring, wantDecision{applies: true, allowed: true, reason: ReasonNodeDeadline, warning: true, event: EventNodeDeadline, msg: []string{"2026-12-06T11:59:00Z"}}},
		"not yet: the grace period still fits":   {karpenterReview(now, now.Add(31*time.Second), sec(30)), honoring, wantDecision{}},
		"a longer grace period passes it sooner": {karpenterReview(now, now.Add(5*time.Minute), sec(600)), honoring, wantDecision{applies: true, allowed: true, reason: ReasonNodeDeadline, warning: true, event: EventNodeDeadline, msg: []string{"(600s)"}}},
		"pod without a grace period":             {karpenterReview(now, now.Add(-time.Minute), nil), honoring, wantDecision{}},
		"no NodeClaim deadline":                  {karpenterReview(now, time.Time{}, sec(30)), honoring, wantDecision{}},
		"flag off":                               {passed, off, wantDecision{}},
		"not Karpenter": {func() review {
			r := passed
			r.User = authenticationv1.UserInfo{Username: "kubernetes-admin"}
			return r
		}(), honoring, wantDecision{}},
		"Karpenter's eviction": {withOp(passed, OperationEvict), honoring, wantDecision{}},
		"dry run":              {withDryRun(passed), honoring, wantDecision{}},
		"idle as far as known": {func() review { r := passed; r.ARC, r.ARCJob = &arc.Runner{Kind: arc.Kind}, ""; return r }(), honoring, wantDecision{}},
		"GitHub said busy": {func() review {
			r := passed
			r.ARC, r.ARCJob = nil, ""
			return *answered(r, githubResult{Outcome: ghclient.Busy, From: knowGitHub})
		}(), honoring, allowed},
		"GitHub unregistered it": {func() review {
			r := passed
			r.ARC, r.ARCJob = nil, ""
			return *answered(r, githubResult{Outcome: ghclient.Removed, From: knowGitHub})
		}(), honoring, wantDecision{}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.r.NodeDeadlinePassed = nodeDeadlinePasses(&tc.r, &tc.p) // as resolve sets it
			got, ok := ruleNodeDeadline(&tc.r, &tc.p)
			checkDecision(t, got, ok, tc.want)
		})
	}
}

func TestNodeClaimDeadline(t *testing.T) {
	deleted := metav1.NewTime(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	nodeClaim := func(del *metav1.Time, tgp string, annotation string) *unstructured.Unstructured {
		nc := &unstructured.Unstructured{Object: map[string]any{}}
		nc.SetGroupVersionKind(nodeClaimGVK())
		nc.SetName("default-abc")
		nc.SetDeletionTimestamp(del)
		if tgp != "" {
			_ = unstructured.SetNestedField(nc.Object, tgp, "spec", "terminationGracePeriod")
		}
		if annotation != "" {
			nc.SetAnnotations(map[string]string{AnnotationNodeClaimTerminationTimestamp: annotation})
		}
		return nc
	}
	tests := map[string]struct {
		nc     *unstructured.Unstructured
		want   time.Time
		wantOK bool
	}{
		"deletionTimestamp plus terminationGracePeriod": {nodeClaim(&deleted, "60s", ""), deleted.Add(time.Minute), true},
		"Karpenter's annotation wins (tightened)":       {nodeClaim(&deleted, "1h", "2026-12-06T12:00:30Z"), deleted.Add(30 * time.Second), true},
		"unparsable annotation: the grace period":       {nodeClaim(&deleted, "60s", "soon"), deleted.Add(time.Minute), true},
		"not being deleted":                             {nodeClaim(nil, "60s", "2026-12-06T12:00:30Z"), time.Time{}, false},
		"no terminationGracePeriod":                     {nodeClaim(&deleted, "", ""), time.Time{}, false},
		"malformed terminationGracePeriod":              {nodeClaim(&deleted, "a while", ""), time.Time{}, false},
		"none":                                          {nil, time.Time{}, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, ok := NodeClaimDeadline(tc.nc)
			if ok != tc.wantOK || !got.At.Equal(tc.want) {
				t.Fatalf("NodeClaimDeadline = %s, %v; want %s, %v", got.At, ok, tc.want, tc.wantOK)
			}
			if ok && got.NodeClaim != "default-abc" {
				t.Errorf("NodeClaim = %q", got.NodeClaim)
			}
		})
	}
}

func TestNodeClaimOwner(t *testing.T) {
	owned := func(apiVersion, kind string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "default-abc"}}}}
	}
	tests := map[string]struct {
		node *corev1.Node
		want string
	}{
		"Karpenter's node":   {owned("karpenter.sh/v1", "NodeClaim"), "default-abc"},
		"another owner":      {owned("example.com/v1", "NodeClaim"), ""},
		"not owned":          {&corev1.Node{}, ""},
		"an older NodeClaim": {owned("karpenter.sh/v1beta1", "NodeClaim"), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := NodeClaimOwner(tc.node); got != tc.want {
				t.Errorf("NodeClaimOwner = %q, want %q", got, tc.want)
			}
		})
	}
}

// deadlineHarness is a harness whose API server also holds node n1, owned by
// NodeClaim default-abc, deleted deletedAgo ago with a terminationGracePeriod
// of 60s, and the pod on n1.
func deadlineHarness(t *testing.T, honor bool, pod *corev1.Pod, deletedAgo time.Duration) *harness {
	t.Helper()
	clock := fakeclock.New(time.Now())
	gh, client := fixture.FakeGitHubClocked(t, clock.Now, ghfake.WithScopes(acme()))
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "karpenter.sh/v1", Kind: "NodeClaim", Name: "default-abc", UID: "nc-uid"}}}}
	nc := &unstructured.Unstructured{Object: map[string]any{}}
	nc.SetGroupVersionKind(nodeClaimGVK())
	nc.SetName("default-abc")
	nc.SetFinalizers([]string{"karpenter.sh/termination"})
	_ = unstructured.SetNestedField(nc.Object, "60s", "spec", "terminationGracePeriod")
	reader := fake.NewClientBuilder().WithRESTMapper(DecisionRESTMapper()).WithRuntimeObjects(legacyRunner().Obj(), pod, node).Build()
	if err := reader.Create(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	// The fake client sets a deletionTimestamp of now: the deadline is
	// moved back by deletedAgo through Karpenter's annotation.
	if err := reader.Delete(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	if err := reader.Get(context.Background(), types.NamespacedName{Name: "default-abc"}, nc); err != nil {
		t.Fatal(err)
	}
	nc.SetAnnotations(map[string]string{AnnotationNodeClaimTerminationTimestamp: nc.GetDeletionTimestamp().Add(time.Minute - deletedAgo).Format(time.RFC3339)})
	if err := reader.Update(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	cfg := Config{HonorNodeDeadlines: honor}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	h := &harness{clock: clock, github: gh, events: events.NewFakeRecorder(100), metrics: NewMetrics()}
	handler, err := NewHandler(Options{Config: cfg, GitHub: client, Runners: arc.NewResolver(arc.Options{Reader: reader}),
		Pods: reader, Events: h.events, Metrics: h.metrics, Now: h.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(&admission.Webhook{Handler: handler})
	t.Cleanup(srv.Close)
	h.url = srv.URL + Path
	gh.AddRunner(acme(), "runner-1")
	gh.SetBusy(acme(), "runner-1", true)
	return h
}

// Karpenter's DELETE of a busy runner's pod (GitHub says busy) on a node
// whose NodeClaim's deadline less the pod's grace period has passed goes,
// with an Event naming the NodeClaim; before it, from anyone else, or with
// the flag off, the pod is held as ever.
func TestHandlerNodeDeadline(t *testing.T) {
	tests := map[string]struct {
		honor      bool
		deletedAgo time.Duration // the NodeClaim's terminationGracePeriod is 60s
		user       string
		allowed    bool
		reason     Reason
	}{
		"Karpenter past the deadline":   {honor: true, deletedAgo: 45 * time.Second, user: testKarpenter, allowed: true, reason: ReasonNodeDeadline},
		"Karpenter before the deadline": {honor: true, deletedAgo: 10 * time.Second, user: testKarpenter, reason: ReasonRunnerBusy},
		"someone else past it":          {honor: true, deletedAgo: 45 * time.Second, user: "kubernetes-admin", reason: ReasonRunnerBusy},
		"flag off":                      {honor: false, deletedAgo: 45 * time.Second, user: testKarpenter, reason: ReasonRunnerBusy},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			grace := int64(30)
			pod := fixture.MakeLegacyRunnerPod("ci", "runner-1").Org("acme").Running().Obj()
			pod.Spec.NodeName, pod.Spec.TerminationGracePeriodSeconds = "n1", &grace
			h := deadlineHarness(t, tc.honor, pod, tc.deletedAgo)
			_, out := h.post(t, reviewJSON(t, request{op: OperationDelete, pod: pod, user: tc.user}))
			if out.Response.Allowed != tc.allowed || !strings.Contains(out.Response.Result.Message, string(tc.reason)) {
				t.Fatalf("allowed = %v, result %+v; want allowed %v, reason %s", out.Response.Allowed, out.Response.Result, tc.allowed, tc.reason)
			}
			if !tc.allowed {
				return
			}
			select {
			case ev := <-h.events.Events:
				if !strings.Contains(ev, EventNodeDeadline) || !strings.Contains(ev, "NodeClaim default-abc") {
					t.Errorf("Event %q, want %s naming the NodeClaim", ev, EventNodeDeadline)
				}
			default:
				t.Error("no Event")
			}
			if _, ok := h.github.Runner(acme(), "runner-1"); !ok {
				t.Error("the busy runner was unregistered")
			}
		})
	}
}
