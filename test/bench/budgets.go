package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/runner-guard/runner-guard/test/e2e/framework"
	"github.com/runner-guard/runner-guard/webhook"
)

// Sizes of the job budget runs.
const (
	budgetLagRuns = 40
	budgetBusy    = 1000
	budgetIdle    = 100
)

// jobFields is the listener's JobStarted patch of an EphemeralRunner's status.
func jobFields(id int) []byte {
	b, _ := json.Marshal(map[string]any{"status": map[string]any{"jobRequestId": id, "jobId": fmt.Sprint(id), "jobRepositoryName": "acme/app", "jobDisplayName": "build"}})
	return b
}

// setStatus merge-patches an EphemeralRunner's status.
func (d *disruptionBench) setStatus(ctx context.Context, ns, name string, patch []byte) error {
	_, err := d.dyn.Resource(framework.EphemeralRunnerResource()).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// budgetLag: job fields set -> the pod's job budget in place, and the
// EphemeralRunner done -> the budget gone, one runner at a time.
func (d *disruptionBench) budgetLag(ctx context.Context, e *env) error {
	const ns = "bench-budget-lag"
	return d.runnerLags(ctx, e, ns, "lag", budgetLagRuns, "budget_lag_p99_ms", "<= 1000, 0 GitHub requests",
		"job fields set -> job budget in place, and EphemeralRunner done -> budget gone, real API server", func(i int, name string) ([]time.Duration, error) {
			return d.budgetLagOf(ctx, ns, name, jobFields(2000+i))
		})
}

// budgetLagOf: the runner's job fields set -> its pod's job budget in
// place, and its EphemeralRunner done -> the budget gone.
func (d *disruptionBench) budgetLagOf(ctx context.Context, ns, name string, job []byte) ([]time.Duration, error) {
	pod, err := d.fenv.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	sel := metav1.ListOptions{LabelSelector: webhook.LabelJobBudget + "=" + string(pod.UID)}
	var lags []time.Duration
	for _, step := range []struct {
		patch []byte
		want  watch.EventType
	}{{job, watch.Added}, {[]byte(`{"status":{"phase":"Succeeded"}}`), watch.Deleted}} {
		w, err := d.fenv.Client.PolicyV1().PodDisruptionBudgets(ns).Watch(ctx, sel)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		if err := d.setStatus(ctx, ns, name, step.patch); err != nil {
			w.Stop()
			return nil, err
		}
		err = untilBudgetEvent(ctx, w, step.want)
		lags = append(lags, time.Since(start))
		w.Stop()
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", name, err)
		}
	}
	return lags, nil
}

// untilBudgetEvent waits on a budget watch for an event of type want on a job budget.
func untilBudgetEvent(ctx context.Context, w watch.Interface, want watch.EventType) error {
	return untilEvent(ctx, w, fmt.Sprintf("a %s job budget", want), func(ev watch.Event) bool {
		pdb, isPDB := ev.Object.(*policyv1.PodDisruptionBudget)
		return isPDB && ev.Type == want && webhook.IsJobBudget(pdb)
	})
}

// budgetsPerRunner: budgetBusy busy and budgetIdle idle runners -> exactly
// one job budget for each busy pod, none for an idle one.
func (d *disruptionBench) budgetsPerRunner(ctx context.Context, e *env) error {
	const ns = "bench-budgets"
	scope := org("bench-budgets")
	if err := d.fenv.CreateNamespace(ctx, ns); err != nil {
		return err
	}
	for i := range budgetBusy + budgetIdle {
		name := fmt.Sprintf("b-%04d", i)
		if err := d.runner(ctx, ns, name, framework.NodeName, scope); err != nil {
			return err
		}
		if i < budgetBusy {
			if err := d.setStatus(ctx, ns, name, jobFields(5000+i)); err != nil {
				return err
			}
		}
	}
	start := time.Now()
	var perPod map[string]int
	for {
		pods, err := d.fenv.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		pdbs, err := d.fenv.Client.PolicyV1().PodDisruptionBudgets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		uids := map[string]string{}
		for _, p := range pods.Items {
			uids[string(p.UID)] = p.Name
		}
		perPod = map[string]int{}
		for i := range pdbs.Items {
			if webhook.IsJobBudget(&pdbs.Items[i]) {
				perPod[uids[pdbs.Items[i].Labels[webhook.LabelJobBudget]]]++
			}
		}
		if len(perPod) >= budgetBusy || time.Since(start) > 2*time.Minute {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A moment more: a second budget for a pod would show now.
	time.Sleep(2 * time.Second)
	exact, extra, idleWith := 0, 0, 0
	for i := range budgetBusy + budgetIdle {
		n := perPod[fmt.Sprintf("b-%04d", i)]
		switch {
		case i >= budgetBusy && n > 0:
			idleWith++
		case i < budgetBusy && n == 1:
			exact++
		case n > 1:
			extra++
		}
	}
	progress("budgets: %d of %d busy runners with exactly one job budget (%d with more), %d of %d idle ones with any", exact, budgetBusy, extra, idleWith, budgetIdle)
	e.record("budgets_per_busy_runner", float64(exact)/budgetBusy, "budgets", "exactly 1 each, 0 for idle", exact == budgetBusy && extra == 0 && idleWith == 0,
		fmt.Sprintf("%d busy scale-set runners: %d with exactly one job budget, %d with more; %d idle: %d with one", budgetBusy, exact, extra, budgetIdle, idleWith))
	return nil
}

// webhookDownEvictions: runner-guard stopped, the evictions entry Ignore:
// evictions of busy runners (their job budgets in place) and idle ones.
// The API server alone decides.
func (d *disruptionBench) webhookDownEvictions(ctx context.Context, e *env) error {
	const ns, n = "bench-budgets", 20
	vwcs, err := d.fenv.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	ignore := admissionregistrationv1.Ignore
	set := false
	for _, vwc := range vwcs.Items {
		for i, wh := range vwc.Webhooks {
			if len(wh.Rules) > 0 && len(wh.Rules[0].Resources) > 0 && wh.Rules[0].Resources[0] == "pods/eviction" {
				vwc.Webhooks[i].FailurePolicy, set = &ignore, true
				if _, err := d.fenv.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, &vwc, metav1.UpdateOptions{}); err != nil {
					return err
				}
			}
		}
	}
	if !set {
		return fmt.Errorf("no evictions entry to set to Ignore")
	}
	if err := d.scaleToZero(ctx); err != nil {
		return err
	}
	evict := func(name string) error {
		return d.fenv.Client.PolicyV1().Evictions(ns).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}
	busyAdmitted, idleRefused := 0, 0
	var notes []string
	for i := range n {
		if err := evict(fmt.Sprintf("b-%04d", i)); err == nil {
			busyAdmitted++
		}
		if err := evict(fmt.Sprintf("b-%04d", budgetBusy+i)); err != nil {
			idleRefused++
			if len(notes) < 3 {
				notes = append(notes, err.Error())
			}
		}
	}
	progress("runner-guard down, evictions Ignore: %d of %d busy runners' evictions admitted, %d of %d idle ones' refused %v", busyAdmitted, n, idleRefused, n, notes)
	e.record("busy_evictions_admitted_webhook_down", float64(busyAdmitted), "evictions", "0", busyAdmitted == 0,
		fmt.Sprintf("%d busy runners, runner-guard stopped, evictions failurePolicy Ignore: the API server refuses each for its job budget", n))
	e.record("idle_evictions_refused_webhook_down", float64(idleRefused), "evictions", "0", idleRefused == 0,
		fmt.Sprintf("%d idle runners, same: none held", n))
	return nil
}
