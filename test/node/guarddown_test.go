package node

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// chartDefaultEvictions are the overrides that put the node's install back
// to the chart's defaults for evictions: the entry covers labelled
// namespaces only and takes the chart's default failurePolicy, and legacy
// runners' scopes are listed (the node's values turn listings off for the
// e2e suite). The rest is the chart's default already: disruption.budgets
// on, events.enabled off.
const chartDefaultEvictions = "policy:\n  evictionsFailurePolicy: \"\"\n  evictionsInAllNamespaces: false\ndisruption:\n  hintsFromListing: true\n"

// At the chart's defaults (job budgets on, listings on, no deliveries) a busy
// scale-set runner has a job budget (its EphemeralRunner's job fields), and so
// does a busy legacy runner once the leader's listing shows its job. A job
// that starts while no replica is ready has none: nobody lists. So the chart
// leaves the evictions entry at Fail whatever the budgets, and with every
// runner-guard replica gone the API server, unable to reach the webhook,
// refuses every busy runner's eviction (500, failed calling webhook), the
// late job's too: no job is lost. The cost is an idle runner's eviction
// refused too, since nothing can tell them apart without runner-guard. The
// scenario then shows what Ignore would do to the late job's runner: its
// eviction is admitted (a dry run, so the job survives the proof).
func TestNodeDrainChartDefaultsGuardDownRefusesLegacyEvictions(t *testing.T) {
	s := newScenario(t, "guard-down")
	// Cleanups run last first: the CRD gone, the values restored.
	s.restoreValuesAfterTest()
	dyn := s.installEphemeralRunnerCRD()
	s.upgradeRunnerGuard(chartDefaultEvictions)
	s.logRunnerGuardOnFailure()
	s.kubectl("label", "namespace", s.ns, guardLabel+"=enabled")
	s.eventually("the evictions entry at the chart's default failurePolicy Fail", 90*time.Second, func() error {
		vwc, err := cluster.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(s.ctx, "runner-guard", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if a := vwc.Annotations["runner-guard.io/evictions-failure-policy"]; a != "Fail" {
			return fmt.Errorf("the chart rendered the evictions entry's policy %q", a)
		}
		if p := s.failurePolicies()["evictions.runner-guard.io"]; p != "Fail" {
			return fmt.Errorf("evictions entry at failurePolicy %q", p)
		}
		return nil
	})

	s.startRunners("runner-busy", "runner-idle", "runner-late")
	s.startScaleSetRunner(dyn, "runner-set-busy")
	for _, name := range []string{"runner-busy", "runner-set-busy"} {
		s.startJob(name)
	}
	s.setEphemeralRunnerJob(dyn, "runner-set-busy", s.org+"/app", 1)
	busy := s.pod("runner-busy")
	// A scale-set runner's job is on its EphemeralRunner, a legacy runner's
	// in the leader's listing: their budgets hold them.
	s.waitJobBudget(s.pod("runner-set-busy"), 60*time.Second)
	s.waitJobBudget(busy, 120*time.Second)
	late := s.pod("runner-late")
	if n := len(s.budgetsSelecting(late)); n != 0 {
		t.Fatalf("%d budgets select the idle runner-late's pod, want none", n)
	}

	s.scaleRunnerGuardToZero()
	// A job that starts during the outage: no replica lists, so no budget
	// holds it; only the webhook's failurePolicy can.
	s.startJob("runner-late")

	evict := func(name string, dryRun bool) error {
		ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
		defer cancel()
		ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}}
		if dryRun {
			ev.DeleteOptions = &metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
		}
		return cluster.Client.PolicyV1().Evictions(s.ns).Evict(ctx, ev)
	}
	refusedByFail := func(err error) bool {
		return err != nil && !apierrors.IsTooManyRequests(err) && strings.Contains(err.Error(), "failed calling webhook")
	}

	admitted := 0
	err := evict("runner-busy", false)
	if err == nil {
		admitted++
	}
	t.Logf("legacy busy runner's eviction with runner-guard down: %v", err)
	if !refusedByFail(err) {
		t.Errorf("eviction of the busy legacy runner's pod with runner-guard down: %v; want it refused as failed calling webhook (evictions Fail at the chart's defaults)", err)
	}
	err = evict("runner-late", false)
	if err == nil {
		admitted++
	}
	t.Logf("legacy runner whose job started during the outage, eviction with runner-guard down: %v", err)
	if !refusedByFail(err) {
		t.Errorf("eviction of runner-late's pod (its job started while runner-guard was down, no budget) with runner-guard down: %v; want it refused as failed calling webhook", err)
	}
	if n := len(s.budgetsSelecting(s.pod("runner-late"))); n != 0 {
		t.Errorf("%d budgets select runner-late's pod, whose job started while runner-guard was down; want none (nobody listed)", n)
	}
	// The scale-set runner's is refused too, by the webhook's Fail or its
	// budget's 429, whichever the API server meets first.
	err = evict("runner-set-busy", false)
	if err == nil {
		admitted++
	}
	t.Logf("scale-set busy runner's eviction with runner-guard down: %v", err)
	if err == nil {
		t.Errorf("eviction of the busy scale-set runner's pod with runner-guard down admitted; want it refused")
	}
	t.Logf("busy_evictions_admitted_guard_down_chart_defaults=%d of 3 (two legacy, one of them started during the outage; one scale-set)", admitted)

	refused := 0
	err = evict("runner-idle", false)
	if refusedByFail(err) {
		refused++
	}
	t.Logf("idle_evictions_refused_guard_down_chart_defaults=%d of 1 (legacy; eviction answered: %v)", refused, err)
	if refused != 1 {
		t.Errorf("eviction of the idle legacy runner's pod with runner-guard down: %v; want it refused as failed calling webhook too: the API server cannot ask the webhook whether it is idle", err)
	}

	// Nothing moved: both pods run, both runners registered, the job goes on.
	time.Sleep(3 * time.Second)
	for _, name := range []string{"runner-busy", "runner-idle", "runner-late", "runner-set-busy"} {
		p := s.pod(name)
		if p == nil || p.DeletionTimestamp != nil || !s.containerRunning(name) || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("%s's pod disturbed while runner-guard was down: %s", name, s.podSummary(name))
		}
		if !s.registered(name) {
			t.Errorf("%s unregistered while runner-guard was down", name)
		}
	}
	if p := s.pod("runner-busy"); p == nil || p.UID != busy.UID {
		t.Fatalf("the busy runner's pod was replaced: %s", s.podSummary("runner-busy"))
	}
	for _, name := range []string{"runner-busy", "runner-late", "runner-set-busy"} {
		if l := s.logs(name); strings.Contains(l, "job cancelled") || strings.Contains(l, "exiting") {
			t.Fatalf("busy runner %s was stopped during its job: %s", name, l)
		}
	}

	// Ignore on the evictions entry (the chart's former default with
	// budgets and listings on). No replica is left to put the annotated
	// policy back, so the entry stays as patched until the cleanup's upgrade
	// and scale-up.
	s.patchEvictionsPolicy("Ignore")
	t.Cleanup(func() { s.patchEvictionsPolicy("Fail") })
	if err := evict("runner-late", true); err != nil {
		t.Errorf("dry-run eviction of runner-late's pod under Ignore with runner-guard down: %v; want it admitted (no job budget holds a job started during the outage), the loss Fail prevents", err)
	} else {
		t.Log("under Ignore runner-late's eviction is admitted (dry run): the job it started during the outage would be lost")
	}
}

// patchEvictionsPolicy sets the live failurePolicy of the evictions entry.
func (s *scenario) patchEvictionsPolicy(p string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	patch := `[{"op":"test","path":"/webhooks/2/name","value":"evictions.runner-guard.io"},{"op":"replace","path":"/webhooks/2/failurePolicy","value":"` + p + `"}]`
	if out, err := cluster.Kubectl(ctx, "patch", "validatingwebhookconfiguration", "runner-guard", "--type=json", "-p", patch); err != nil {
		s.t.Errorf("set the evictions entry's failurePolicy to %s: %v: %s", p, err, out)
	}
}
