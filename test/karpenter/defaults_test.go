package karpenter

import (
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/runner-guard/runner-guard/ghclient/ghfake"
	"github.com/runner-guard/runner-guard/test/render"
	"github.com/runner-guard/runner-guard/webhook"
)

// At the chart's defaults (its disruption flags taken from a helm template
// of the default values, so --hint-from-listing; no events), ARC legacy
// runners: the leader learns the busy runner's job from GitHub's listing and
// gives its pod karpenter.sh/do-not-disrupt and a job budget before Karpenter
// has a reason to look. Karpenter, consolidating the node of two idle legacy
// runners and the busy runner's node, takes the idle one, and never sends the
// busy runner's pod an eviction: it never taints that node, runner-guard
// never reviews (and refuses) an eviction of the pod, and GitHub is never
// asked to remove the runner. With the chart's former default
// (disruption.hintsFromListing false) the job is known only after a refused
// eviction: no budget appears and Karpenter chooses the busy node first.
//
// Three nodes held by fillers, laid out as TestHintsKeepBusyRunnerNode: the
// busy runner on the first, two idle runners on the second, a pod annotated
// by its user on the third.
func TestChartDefaultsKeepBusyLegacyRunnerNode(t *testing.T) {
	s := newScenario(t, "defaults", NodePoolSpec{})
	flags, evictions := chartDefaults(t)
	s.requireEvictionsPolicy(evictions)
	s.webhookFlags(flags...)
	fillers, nodes := s.launch(3)
	busyNode, idleNode, anchorNode := nodes[0], nodes[1], nodes[2]
	s.pod("anchor", anchorNode, map[string]string{DoNotDisrupt: "true"})
	busy := s.legacyRunner("busy", busyNode)
	idle := []LegacyRunner{s.legacyRunner("idle-a", idleNode), s.legacyRunner("idle-b", idleNode)}

	// The job starts; nothing on the pod says so, only GitHub's listing.
	jobStart := time.Now()
	cluster.GitHub.SetBusy(busy.Scope, busy.Name, true)
	uid, err := cluster.PodUID(s.ctx, s.name, busy.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Not fatal: without the listing the scenario goes on to show what
	// Karpenter then does.
	if err := cluster.WaitJobBudget(s.ctx, s.name, string(uid), time.Minute); err != nil {
		t.Errorf("busy legacy runner's job unknown before Karpenter looks, flags %q: %v", flags, err)
	} else {
		t.Logf("job budget of busy legacy runner %s seen %.1f s after its job started", busy.Name, time.Since(jobStart).Seconds())
		if err := cluster.WaitAnnotation(s.ctx, s.name, busy.Name, DoNotDisrupt, "true", time.Minute); err != nil {
			t.Error(err)
		}
	}
	s.scaleDown(fillers...)

	s.requireChosenFirst(idleNode, busyNode)
	s.requireIdleNodeTaken(idleNode, busyNode, anchorNode, busy, idle)
	s.requireNeverEvicted(busy)
}

// chartDefaults renders the chart at its default values (with a credentials
// Secret and policy.allowAnyScope, which an install needs)
// and returns the disruption flags of the webhook's command line and the
// evictions entry's failurePolicy. The rest of the command line
// (certificates, credentials, ports, --config) is the harness's own.
func chartDefaults(t *testing.T) (flags []string, evictions admissionregistrationv1.FailurePolicyType) {
	t.Helper()
	objs := render.MustTemplate(t, "--set", "github.credentials.existingSecret=runner-guard-github", "--set", "policy.allowAnyScope=true")
	d := render.Get[appsv1.Deployment](t, objs, "Deployment", render.ReleaseName+"-webhook")
	disruption := []string{"--hint-", "--disruption-", "--drain-runners", "--honor-node-deadlines"}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		if slices.ContainsFunc(disruption, func(p string) bool { return strings.HasPrefix(a, p) }) {
			flags = append(flags, a)
		}
	}
	vwc := render.Get[admissionregistrationv1.ValidatingWebhookConfiguration](t, objs, "ValidatingWebhookConfiguration", render.ReleaseName)
	evictions = admissionregistrationv1.FailurePolicyType(vwc.Annotations["runner-guard.io/evictions-failure-policy"])
	t.Logf("the chart's defaults: disruption flags %q, evictions failurePolicy %s", flags, evictions)
	return flags, evictions
}

// requireEvictionsPolicy fails unless the harness's evictions entry has
// failurePolicy want.
func (s *scenario) requireEvictionsPolicy(want admissionregistrationv1.FailurePolicyType) {
	s.t.Helper()
	vwc, err := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(s.ctx, "runner-guard", metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, wh := range vwc.Webhooks {
		if wh.Name == "evictions.runner-guard.io" && (wh.FailurePolicy == nil || *wh.FailurePolicy != want) {
			s.t.Fatalf("the harness's evictions entry at failurePolicy %v, the chart's default is %s", wh.FailurePolicy, want)
		}
	}
}

// requireNeverEvicted fails if runner-guard reviewed an eviction of the
// runner's pod (a refusal records a RunnerBusy Event on the pod) or asked
// GitHub to remove the runner.
func (s *scenario) requireNeverEvicted(r LegacyRunner) {
	s.t.Helper()
	sel := fields.SelectorFromSet(fields.Set{"involvedObject.name": r.Name, "reason": webhook.EventRunnerBusy}).String()
	evs, err := cluster.Client.CoreV1().Events(s.name).List(s.ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		s.t.Fatal(err)
	}
	for _, e := range evs.Items {
		s.t.Errorf("busy runner %s was sent an eviction: Event %s %q (%d times)", r.Name, e.Reason, e.Message, e.Count)
	}
	for _, req := range cluster.GitHub.Requests() {
		if req.Op == ghfake.OpRemove && req.RunnerID == r.ID && req.Scope != nil && strings.EqualFold(req.Scope.Name, r.Scope.Name) {
			s.t.Errorf("busy runner %s: GitHub asked to remove it (%s %s answered %d)", r.Name, req.Method, req.Path, req.Status)
		}
	}
}
