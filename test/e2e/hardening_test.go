package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/webhook"
)

// Scenario 12: `kubectl drain --dry-run=server` sends the dry run only inside
// each Eviction's deleteOptions. It must unregister nothing and change nothing.
func TestServerDryRunDrainChangesNothing(t *testing.T) {
	s := newScenario(t, "dryrun-drain")
	const node = "e2e-node-dryrun"
	if err := env.EnsureNode(s.ctx, node); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		name string
		busy bool
	}{{"runner-idle", false}, {"runner-busy", true}} {
		id := env.GitHub.AddRunner(s.scope, r.name)
		env.GitHub.SetBusy(s.scope, r.name, r.busy)
		pod := legacyRunnerPod(s.ns, r.name, s.scope)
		pod.Spec.NodeName = node
		pod.Annotations = map[string]string{"actions-runner/id": fmt.Sprint(id)}
		s.create(pod)
	}
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	// The busy runner's dry-run eviction is refused (429) and drain retries it
	// until its timeout; what matters is what it changed.
	stdout, stderr, _ := env.Kubectl(ctx, "drain", node, "--dry-run=server", "--ignore-daemonsets", "--force", "--timeout=15s")
	if n := s.count("DELETE"); n != 0 {
		t.Errorf("server-side dry-run drain sent %d DELETEs to GitHub, want 0\nstdout: %s\nstderr: %s", n, stdout, stderr)
	}
	for _, name := range []string{"runner-idle", "runner-busy"} {
		s.requireAlive(name)
		if !s.registered(name) {
			t.Errorf("runner %s unregistered by a dry run", name)
		}
	}
	n, err := env.Client.CoreV1().Nodes().Get(s.ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Spec.Unschedulable {
		t.Error("a server-side dry-run drain cordoned the node")
	}
}

// Scenario 13: pod GC marks the pods of a deleted Node Failed with a
// DisruptionTarget condition and deletes them. If the node is in fact alive
// and its runner busy, the delete is refused; once GitHub sees the runner
// offline, it goes.
func TestDisruptedPodOfALiveRunnerIsKept(t *testing.T) {
	s := newScenario(t, "disrupted")
	pod := s.runnerPod("runner-disrupted", true, true)
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByPodGC",
		Message: "PodGC: node no longer exists", LastTransitionTime: metav1.Now(),
	})
	if _, err := env.Client.CoreV1().Pods(s.ns).UpdateStatus(s.ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	const gc = "--as=system:serviceaccount:kube-system:pod-garbage-collector"
	_, stderr, err := s.kubectl("delete", "pod", "runner-disrupted", "--wait=false", gc)
	if err == nil || !strings.Contains(stderr, "runner busy") {
		t.Fatalf("delete of a disrupted pod whose runner is busy: err %v, stderr %q; want runner busy", err, stderr)
	}
	s.requireAlive("runner-disrupted")
	// Pod GC retries; runner-guard answers the retries from the read-only
	// look-up it remembers (readOnlyMemoryTTL) until that expires, then sees
	// the runner offline.
	env.GitHub.SetOnline(s.scope, "runner-disrupted", false)
	deleteUntilAdmitted(s, "runner-disrupted", gc)
	s.requireDeleting("runner-disrupted")
}

// Scenario 14: every refused eviction is a 429 (drain gives up on anything
// else), the unknown-scope refusal included.
func TestUnknownScopeEvictionIs429(t *testing.T) {
	s := newScenario(t, "noscope-evict")
	pod := legacyRunnerPod(s.ns, "runner-noscope", s.scope)
	pod.Spec.Containers[0].Env = pod.Spec.Containers[0].Env[:1] // RUNNER_NAME only
	s.create(pod)
	// client-go retries a 429 by itself (up to 10 times, waiting out each
	// retryAfterSeconds): ask once, to see the code the API server answers.
	ev := &policyv1.Eviction{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Name: "runner-noscope", Namespace: s.ns}}
	err := env.Client.CoreV1().RESTClient().Post().Namespace(s.ns).Resource("pods").Name("runner-noscope").
		SubResource("eviction").Body(ev).MaxRetries(0).Do(s.ctx).Error()
	if !apierrors.IsTooManyRequests(err) {
		t.Fatalf("eviction of a runner pod without a scope: %v, want 429 TooManyRequests", err)
	}
	if !strings.Contains(err.Error(), "scope-unknown") {
		t.Errorf("error %q does not name the reason", err)
	}
	s.requireAlive("runner-noscope")
}

// The runner-released mark on an Eviction (runner-guard.io/runner-released)
// makes the webhook ask GitHub rather than answer from memory or a listing.
// Only runner-guard's own drain may set it: a tenant's marked evictions of a
// busy runner's pod are answered as unmarked ones (at most one DELETE per
// replica, then memory), not one GitHub request each; runner-guard's own
// user (learnt at start with a SelfSubjectReview) is heeded.
func TestReleasedMarkHeededOnlyFromRunnerGuard(t *testing.T) {
	if !env.Local() {
		t.Skip("needs the local harness: the webhook's own user")
	}
	s := newScenario(t, "released-mark")
	env.GitHub.AddRunner(s.scope, "runner-marked")
	env.GitHub.SetBusy(s.scope, "runner-marked", true)
	s.create(legacyRunnerPod(s.ns, "runner-marked", s.scope))
	evict := func(user string) error {
		c, err := env.ClientAs(user)
		if err != nil {
			t.Fatal(err)
		}
		ev := &policyv1.Eviction{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
			ObjectMeta: metav1.ObjectMeta{Name: "runner-marked", Namespace: s.ns, Annotations: map[string]string{webhook.EvictionReleasedAnnotation: "drain"}}}
		return c.CoreV1().RESTClient().Post().Namespace(s.ns).Resource("pods").Name("runner-marked").
			SubResource("eviction").Body(ev).MaxRetries(0).Do(s.ctx).Error()
	}
	const tenantEvictions = 6
	for i := range tenantEvictions {
		if err := evict("tenant"); !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "runner busy") {
			t.Fatalf("tenant's marked eviction %d: %v, want 429 runner busy", i+1, err)
		}
	}
	deletes := s.count("DELETE")
	if replicas := env.Replicas(); deletes > replicas {
		t.Errorf("%d marked evictions by a tenant cost %d GitHub DELETEs; want at most one per replica (%d): the mark is runner-guard's own", tenantEvictions, deletes, replicas)
	}
	const ownEvictions = 2
	for i := range ownEvictions {
		if err := evict(framework.WebhookUser); !apierrors.IsTooManyRequests(err) {
			t.Fatalf("runner-guard's own marked eviction %d: %v, want 429 (the runner is busy)", i+1, err)
		}
	}
	if got := s.count("DELETE") - deletes; got != ownEvictions {
		t.Errorf("runner-guard's own %d marked evictions sent %d DELETEs; want one each (GitHub asked, memory bypassed)", ownEvictions, got)
	}
	s.requireAlive("runner-marked")
}
