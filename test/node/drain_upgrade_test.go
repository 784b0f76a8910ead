package node

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 37, item 4: the upgrade test. The release at the baseline
// (UPGRADE_BASELINE: its chart and webhook image) with runners running and a
// drain in flight, held by the budget (the stand-ins of the runners gone are
// not started yet), then `helm upgrade` to the working tree's chart and
// image. The rest of the drain goes through old and new replicas side by
// side: the budget reopens once the first new replica is Ready. The same
// checks pass before and after (busy runners held, idle ones unregistered
// and gone, no runner unregistered whose pod stays, no refusal beyond its
// budget or job), the upgrade changes no decision (the same pods held,
// refused as busy by the new replicas), and the drain finishes once the
// jobs end. Its own upgrade puts the node's values back; a failed test's
// cleanup does.
func TestNodeUpgradeFromBaselineMidDrain(t *testing.T) {
	baseline, err := ParseBaseline(os.Getenv("RUNNER_GUARD_NODE_BASELINE"))
	if err != nil {
		t.Fatal(err)
	}
	s := newScenario(t, "drain-baseline")
	s.restoreValuesAfterFailure()
	start := time.Now()
	if err := cluster.InstallBaseline(s.ctx, os.Getenv("HELM"), baseline); err != nil {
		t.Fatalf("install the baseline %s: %v", baseline.Commit, err)
	}
	s.requireWebhookImage(":" + baseline.Tag)
	t.Logf("runner-guard at the baseline %s in %s", baseline.Commit, time.Since(start).Round(time.Second))

	standIns := make(chan struct{})
	d := startDrainRunGated(s, standIns)
	d.waitBudgetSpent()
	d.checkHeld()
	d.check()
	if t.Failed() {
		t.Fatalf("the drain at the baseline %s already fails its checks", baseline.Commit)
	}

	start = time.Now()
	upgrade := make(chan error, 1)
	go func() { upgrade <- cluster.UpgradeRunnerGuard(s.ctx, repoRoot, os.Getenv("HELM"), "") }()
	s.waitWebhookReplicaReady(":latest")
	close(standIns)
	d.burstWhenBudgetReopens()
	t.Logf("a working-tree replica Ready %s into the upgrade; the budget reopened, every waiting eviction sent again at once", time.Since(start).Round(time.Second))
	if err := <-upgrade; err != nil {
		t.Fatalf("helm upgrade from the baseline %s to the working tree mid-drain: %v", baseline.Commit, err)
	}
	upgraded := time.Now()
	s.requireWebhookImage(":latest")
	t.Logf("upgraded from %s to the working tree in %s, the drain waiting for %d busy runners", baseline.Commit, upgraded.Sub(start).Round(time.Second), drainBusy)

	// The same decisions: every busy runner's eviction refused as busy again
	// by the working tree's replicas, the same pods held.
	d.waitIdleGone()
	d.waitHeld(upgraded)
	d.checkHeld()
	d.endJobs()
	d.waitDrained()
	d.check()
}

// waitBudgetSpent waits until drainBudgetAllows idle runners' pods are gone
// and every other runner's eviction has been refused, for the budget (which
// runner-guard weighs before it asks GitHub) or as busy.
func (d *drainRun) waitBudgetSpent() {
	d.s.eventually("the budget spent, the other runners' evictions refused", 60*time.Second, func() error {
		gone, waiting := 0, []string{}
		for _, n := range d.names {
			p := d.s.pod(n)
			switch {
			case !d.busy[n] && (p == nil || p.DeletionTimestamp != nil):
				gone++
			case !d.refused(n):
				waiting = append(waiting, n)
			}
		}
		if gone != drainBudgetAllows || len(waiting) > 0 {
			return fmt.Errorf("%d idle runners gone (want %d); not yet refused for the budget: %v", gone, drainBudgetAllows, waiting)
		}
		return nil
	})
}

// burstWhenBudgetReopens waits until the runners' budget allows its
// disruptions again (the stand-ins Ready) and sends every waiting eviction
// at once, so replicas of both versions decide them side by side.
func (d *drainRun) burstWhenBudgetReopens() {
	d.s.eventually("the runners' budget reopened", 60*time.Second, func() error {
		b, err := cluster.Client.PolicyV1().PodDisruptionBudgets(d.s.ns).Get(d.s.ctx, "runners", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if b.Status.DisruptionsAllowed < drainBudgetAllows {
			return fmt.Errorf("budget status %+v", b.Status)
		}
		return nil
	})
	d.sendBurst()
}

// refused reports an eviction of name refused for its budget or as busy.
func (d *drainRun) refused(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, a := range d.attempts[name] {
		if strings.Contains(a.refused, "disruption budget") || strings.Contains(a.refused, "allows no disruption of pod") || strings.Contains(a.refused, "runner busy") {
			return true
		}
	}
	return false
}

// waitWebhookReplicaReady waits until a runner-guard replica whose image
// reference ends in suffix is Ready.
func (s *scenario) waitWebhookReplicaReady(suffix string) {
	s.t.Helper()
	s.eventually("a runner-guard replica at "+suffix+" Ready", 3*time.Minute, func() error {
		pods, err := cluster.Client.CoreV1().Pods(rgNamespace).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
		if err != nil {
			return err
		}
		for _, p := range pods.Items {
			if strings.HasSuffix(p.Spec.Containers[0].Image, suffix) && p.DeletionTimestamp == nil &&
				len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready {
				return nil
			}
		}
		return fmt.Errorf("no Ready replica at %s yet", suffix)
	})
}

// heldSince lists the runners (sorted, comma-separated) whose eviction was
// refused as busy at or after since.
func (d *drainRun) heldSince(since time.Time) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var held []string
	for _, n := range d.names {
		for _, a := range d.attempts[n] {
			if !a.at.Before(since) && strings.Contains(a.refused, "runner busy") {
				held = append(held, n)
				break
			}
		}
	}
	return strings.Join(held, ",")
}

// requireWebhookImage checks that every runner-guard replica runs an image
// whose reference ends in suffix.
func (s *scenario) requireWebhookImage(suffix string) {
	s.t.Helper()
	pods, err := cluster.Client.CoreV1().Pods(rgNamespace).List(s.ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=webhook"})
	if err != nil {
		s.t.Fatalf("webhook pods: %v", err)
	}
	for _, p := range pods.Items {
		if img := p.Spec.Containers[0].Image; !strings.HasSuffix(img, suffix) {
			s.t.Fatalf("runner-guard pod %s runs %s, want an image ending in %s", p.Name, img, suffix)
		}
	}
}
