package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/runner-guard/runner-guard/disruption"
	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/test/e2e/framework"
)

// setJob writes the listener's job fields into the EphemeralRunner's status,
// as ARC's listener does on JobStarted (a merge patch of the status).
func (s *scaleSet) setJob(name string, requestID int64, display string) {
	s.t.Helper()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"jobRequestId": requestID, "jobId": fmt.Sprint(requestID), "jobRepositoryName": "acme/app",
		"jobWorkflowRef": "acme/app/.github/workflows/ci.yaml@refs/heads/main", "workflowRunId": 4242, "jobDisplayName": display,
	}})
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.dyn.Resource(framework.EphemeralRunnerResource()).Namespace(s.ns).Patch(s.ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		s.t.Fatalf("set the job fields of EphemeralRunner %s: %v", name, err)
	}
}

// annotations returns the pod's annotations (nil when it is gone).
func (s *scenario) annotations(name string) map[string]string {
	s.t.Helper()
	if p := s.pod(name); p != nil {
		return p.Annotations
	}
	return nil
}

// wantAnnotations waits until the pod carries exactly want for the hint keys.
func (s *scenario) wantAnnotations(name string, want map[string]string) {
	s.t.Helper()
	s.wantAnnotationsWithin(name, want, 10*time.Second)
}

// wantAnnotationsWithin is wantAnnotations waiting up to timeout.
func (s *scenario) wantAnnotationsWithin(name string, want map[string]string, timeout time.Duration) {
	s.t.Helper()
	keys := []string{disruption.AnnotationDoNotDisrupt, disruption.AnnotationSafeToEvict, disruption.AnnotationOwned, disruption.AnnotationDeletionCost}
	s.eventually("hints of pod "+name, timeout, func() error {
		got := s.annotations(name)
		for _, k := range keys {
			if got[k] != want[k] {
				return fmt.Errorf("annotations %v, want %v", got, want)
			}
		}
		return nil
	})
}

// Hints follow the job fields: set within moments of the listener's
// JobStarted patch with no GitHub request, removed when the job ends, and a
// user's own annotation never touched.
func TestHintsFollowJobFields(t *testing.T) {
	s, scope, url := newOrgScaleSet(t, "hints")
	plain := s.runner("hint-plain", url, scope, true, nil)
	users := s.runner("hint-user", url, scope, true, nil)
	if _, stderr, err := s.kubectl("annotate", "pod", users.name, disruption.AnnotationDoNotDisrupt+"=false"); err != nil {
		t.Fatalf("kubectl annotate: %v: %s", err, stderr)
	}
	// Without job fields nothing proves a job: no hints but the idle
	// runner's low deletion cost.
	for _, r := range []scaleSetRunner{plain, users} {
		if a := s.annotations(r.name); a[disruption.AnnotationSafeToEvict] != "" || a[disruption.AnnotationOwned] != "" && a[disruption.AnnotationOwned] != "deletion-cost" {
			t.Fatalf("pod %s has hints before any job: %v", r.name, a)
		}
	}
	before := len(s.github())

	s.setJob(plain.name, 101, "build")
	s.setJob(users.name, 102, "test")
	s.wantAnnotations(plain.name, map[string]string{
		disruption.AnnotationDoNotDisrupt: "true", disruption.AnnotationSafeToEvict: "false", disruption.AnnotationOwned: "do-not-disrupt,safe-to-evict,deletion-cost",
		disruption.AnnotationDeletionCost: disruption.DeletionCost.Value,
	})
	s.wantAnnotations(users.name, map[string]string{
		disruption.AnnotationDoNotDisrupt: "false", disruption.AnnotationSafeToEvict: "false", disruption.AnnotationOwned: "safe-to-evict,deletion-cost",
		disruption.AnnotationDeletionCost: disruption.DeletionCost.Value,
	})
	if reqs := s.github()[before:]; len(reqs) != 0 {
		t.Errorf("hints from job fields cost GitHub requests:%s", describe(reqs))
	}

	// The job ends: ARC marks the EphemeralRunner done; the runner's pod
	// completes. Only runner-guard's own hints go.
	s.setPhase(plain.name, "Succeeded")
	s.wantAnnotations(plain.name, map[string]string{})
	p := s.pod(users.name)
	p.Status.Phase = corev1.PodSucceeded
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
	}
	if _, err := env.Client.CoreV1().Pods(s.ns).UpdateStatus(s.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.wantAnnotations(users.name, map[string]string{disruption.AnnotationDoNotDisrupt: "false"})
	if reqs := s.github()[before:]; len(reqs) != 0 {
		t.Errorf("hints cost GitHub requests:%s", describe(reqs))
	}
}

// Legacy runner pods (no job fields, no --hint-from-listing) get hints from
// the listing the webhook takes anyway: a busy runner's second refused
// delete has it list the scope, and within a look of the hint controller
// both busy runners' pods carry the hints and the idle one's none. Until
// then no legacy pod is looked at, and the hints cost no GitHub request of
// their own.
func TestHintsForLegacyRunnersFromTheWebhooksListing(t *testing.T) {
	if !env.Local() {
		// A listing lives in the process that took it: with several replicas
		// the delete may reach one that is not leading the hint controller.
		t.Skip("needs one replica (the local harness): only the leading replica's listings give hints")
	}
	s := newScenario(t, "legacy-hints")
	s.runnerPod("lh-busy", true, true)
	s.runnerPod("lh-other", true, true)
	s.runnerPod("lh-idle", false, true)
	for _, name := range []string{"lh-busy", "lh-other", "lh-idle"} {
		if a := s.annotations(name); a[disruption.AnnotationOwned] != "" {
			t.Fatalf("pod %s has hints before any listing: %v", name, a)
		}
	}
	if n := len(s.github()); n != 0 {
		t.Fatalf("legacy pods cost %d GitHub requests before any decision, want 0:%s", n, describe(s.github()))
	}
	for i := range 2 {
		if _, stderr, err := s.kubectl("delete", "pod", "lh-busy", "--wait=false"); err == nil || !strings.Contains(stderr, "runner busy") {
			t.Fatalf("delete %d of the busy runner's pod: err %v, stderr %q; want refused with 'runner busy'", i+1, err, stderr)
		}
	}
	if s.listings() == 0 {
		t.Fatalf("the second refused delete took no listing of the scope:%s", describe(s.github()))
	}
	before := len(s.github())
	ours := map[string]string{
		disruption.AnnotationDoNotDisrupt: "true", disruption.AnnotationSafeToEvict: "false", disruption.AnnotationOwned: "do-not-disrupt,safe-to-evict,deletion-cost",
		disruption.AnnotationDeletionCost: disruption.DeletionCost.Value,
	}
	// The hint controller looks at the listings every ListingTTL/2.
	s.wantAnnotationsWithin("lh-busy", ours, 2*ghclient.ListingTTL)
	s.wantAnnotationsWithin("lh-other", ours, 2*ghclient.ListingTTL)
	s.wantAnnotations("lh-idle", map[string]string{disruption.AnnotationOwned: "deletion-cost", disruption.AnnotationDeletionCost: disruption.DeletionCost.Idle})
	if reqs := s.github()[before:]; len(reqs) != 0 {
		t.Errorf("hints from the webhook's listing cost GitHub requests of their own:%s", describe(reqs))
	}
}

// kubectl cordon of a node with idle and busy scale-set runners: the idle
// ones are unregistered and their pods deleted at once (their
// EphemeralRunners retired); a runner GitHub reports busy stays until its
// job ends and then goes; one whose job fields prove a job costs no GitHub
// request, and the Node's Events name its job.
func TestCordonReleasesIdleRunners(t *testing.T) {
	s := newScaleSetOnNode(t, "cordon")
	scope := mustScope(ghclient.OrgScope("org-cordon"))
	url := "https://github.com/" + scope.Name
	idle := []scaleSetRunner{s.runner("idle-1", url, scope, false, nil), s.runner("idle-2", url, scope, false, nil), s.runner("idle-3", url, scope, false, nil)}
	busy := s.runner("busy-github", url, scope, true, nil)
	job := s.runner("busy-job", url, scope, true, nil)
	s.setJob(job.name, 201, "deploy")

	if _, stderr, err := env.Kubectl(s.ctx, "cordon", s.node); err != nil {
		t.Fatalf("kubectl cordon: %v: %s", err, stderr)
	}
	s.waitReleased("idle runners released", 5*time.Second, idle...)
	for _, r := range idle {
		s.waitRetired(r.name)
		s.requireDeleting(r.name)
	}
	s.eventually("the drain asks GitHub about the busy runner again", 30*time.Second, func() error {
		if n := len(requestsFor(s.github(), fmt.Sprintf("/runners/%d", busy.id))); n < 2 {
			return fmt.Errorf("%d requests for runner %s", n, busy.name)
		}
		return nil
	})
	for _, r := range []scaleSetRunner{busy, job} {
		s.requireAlive(r.name)
		if !r.registered() {
			t.Fatalf("busy runner %s unregistered", r.name)
		}
	}
	if reqs := requestsFor(s.github(), fmt.Sprintf("/runners/%d", job.id)); len(reqs) != 0 {
		t.Errorf("a runner whose job fields prove a job was asked about:%s", describe(reqs))
	}
	s.eventually("the pods' Events say what the drain waits for", 10*time.Second, func() error {
		evs := s.drainEvents(busy.name, job.name)
		for _, want := range []string{`job "deploy" of acme/app (workflow run 4242)`, busy.name, "cordoned"} {
			if !strings.Contains(evs, want) {
				return fmt.Errorf("pod events lack %q:\n%s", want, evs)
			}
		}
		return nil
	})

	// The job ends: GitHub's DELETE now answers 204 and the pod goes.
	env.GitHub.SetBusy(scope, busy.name, false)
	s.waitReleased("busy runner released once idle", 30*time.Second, busy)
	s.waitRetired(busy.name)
	s.requireDeleting(busy.name)
	s.requireAlive(job.name)
}

// kubectl cordon of a node whose idle runner's pod a PodDisruptionBudget
// protects: while the budget allows no disruption the drain leaves the
// runner registered and its pod in place (a Node Event says why), and once
// it allows one the runner is released and its pod evicted, which the budget
// counts (status.disruptedPods names it).
func TestCordonHoldsToAPodDisruptionBudget(t *testing.T) {
	s := newScaleSetOnNode(t, "cordon-pdb")
	scope := mustScope(ghclient.OrgScope("org-cordon-pdb"))
	r := s.runner("idle-kept", "https://github.com/"+scope.Name, scope, false, nil)
	s.budgetSelecting("runners", map[string]string{"actions-ephemeral-runner": "True"}, policyv1.IfHealthyBudget,
		policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, CurrentHealthy: 0, DesiredHealthy: 1, ExpectedPods: 1})

	if _, stderr, err := env.Kubectl(s.ctx, "cordon", s.node); err != nil {
		t.Fatalf("kubectl cordon: %v: %s", err, stderr)
	}
	s.eventually("the pod's Events say the budget holds the runner", 15*time.Second, func() error {
		evs := s.drainEvents(r.name)
		if !strings.Contains(evs, disruption.EventDrainWaitsForPDB) || !strings.Contains(evs, "PodDisruptionBudget runners allows no disruption of pod "+s.ns+"/"+r.name) {
			return fmt.Errorf("pod events lack the budget's wait:\n%s", evs)
		}
		return nil
	})
	if !r.registered() {
		t.Fatalf("runner %s unregistered while a budget keeps its pod", r.name)
	}
	if reqs := requestsFor(s.github(), fmt.Sprintf("/runners/%d", r.id)); len(reqs) != 0 {
		t.Errorf("GitHub was asked about the runner a budget keeps:%s", describe(reqs))
	}
	s.requireAlive(r.name)

	pdb, err := env.Client.PolicyV1().PodDisruptionBudgets(s.ns).Get(s.ctx, "runners", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.setBudgetStatus(pdb, policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1, CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1})
	s.waitReleased("the runner released once the budget allows it", 45*time.Second, r)
	s.waitRetired(r.name)
	pdb, err = env.Client.PolicyV1().PodDisruptionBudgets(s.ns).Get(s.ctx, "runners", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pdb.Status.DisruptedPods[r.name]; !ok {
		t.Errorf("PodDisruptionBudget status.disruptedPods = %v, want the evicted pod %s (the pod went by a DELETE, not an eviction)", pdb.Status.DisruptedPods, r.name)
	}
}

var nodeClaims = schema.GroupVersionResource{Group: "karpenter.sh", Version: "v1", Resource: "nodeclaims"}

// A node Karpenter disrupts whose NodeClaim is being deleted with a
// terminationGracePeriod: a Warning Event on the Node says ahead of time
// when that grace period ends the running job, naming it.
func TestGracePeriodWarning(t *testing.T) {
	s := newScaleSetOnNode(t, "tgp")
	scope := mustScope(ghclient.OrgScope("org-tgp"))
	job := s.runner("tgp-busy", "https://github.com/"+scope.Name, scope, true, nil)
	s.setJob(job.name, 301, "release")

	// The NodeClaim Karpenter is deleting: its finalizer keeps it, being deleted.
	claim := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"terminationGracePeriod": "1h"}}}
	claim.SetGroupVersionKind(schema.GroupVersionKind{Group: "karpenter.sh", Version: "v1", Kind: "NodeClaim"})
	claim.SetName("tgp-claim")
	claim.SetFinalizers([]string{keepFinalizer})
	created, err := s.dyn.Resource(nodeClaims).Create(s.ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create NodeClaim: %v", err)
	}
	t.Cleanup(func() {
		_, _ = s.dyn.Resource(nodeClaims).Patch(context.Background(), "tgp-claim", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	})
	if err := unstructured.SetNestedField(created.Object, s.node, "status", "nodeName"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.dyn.Resource(nodeClaims).UpdateStatus(s.ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("NodeClaim status: %v", err)
	}
	if err := s.dyn.Resource(nodeClaims).Delete(s.ctx, "tgp-claim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	taint := []byte(`{"spec":{"taints":[{"key":"karpenter.sh/disrupted","effect":"NoSchedule"}]}}`)
	if _, err := env.Client.CoreV1().Nodes().Patch(s.ctx, s.node, types.StrategicMergePatchType, taint, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = env.Client.CoreV1().Nodes().Patch(context.Background(), "e2e-node-tgp", types.MergePatchType, []byte(`{"spec":{"taints":null}}`), metav1.PatchOptions{})
	})
	s.eventually("a Warning that the grace period ends the job", 20*time.Second, func() error {
		evs := s.drainEvents(job.name)
		for _, want := range []string{"Warning " + disruption.EventJobOutlivesGrace, "tgp-claim", "(1h0m0s)", `job "release" of acme/app`, s.ns + "/" + job.name} {
			if !strings.Contains(evs, want) {
				return fmt.Errorf("pod events lack %q:\n%s", want, evs)
			}
		}
		return nil
	})
	s.requireAlive(job.name)
	if reqs := requestsFor(s.github(), fmt.Sprintf("/runners/%d", job.id)); len(reqs) != 0 {
		t.Errorf("a runner whose job fields prove a job was asked about:%s", describe(reqs))
	}
}
