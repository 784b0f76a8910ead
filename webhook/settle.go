package webhook

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/ghclient"
	"github.com/runner-guard/runner-guard/webhook/arc"
)

// settle carries out what a decision made after the review was resolved
// implies, in one place: GitHub's answer recorded in the memories, the
// decisions-from-knowledge metric, the budget disruption reserved for an
// eviction (kept when it is let through, given back otherwise), and the
// EphemeralRunner of a runner runner-guard unregistered, handed over to be
// retired. asked says GitHub's answer was read (the GitHub rules decided).
func (d *decider) settle(r *review, dec Decision, asked bool) Decision {
	readOnly := r.ReadOnly
	if asked {
		d.record(r, readOnly)
	}
	if dec.Reason == ReasonJobRunning {
		d.metrics.knowledge(knowJobFields)
	} else if asked && !readOnly {
		d.metrics.knowledge(r.GitHub.From)
	}
	if dec.Allowed {
		r.budgetHold.Admitted()
	} else {
		r.budgetHold.Cancel()
	}
	if dec.Reason == ReasonUnregistered && r.ARC != nil && r.ARC.Kind == arc.Kind && d.retire && d.retirements != nil {
		dec = d.retireEphemeralRunner(r.ARC, r.Pod, dec)
	}
	return dec
}

// retireEphemeralRunner hands the EphemeralRunner of a runner runner-guard
// just unregistered to the disruption controller's Retirer, which deletes it
// outside the admission call so ARC's EphemeralRunnerSet creates a fresh
// runner instead of restarting the pod with a dead registration. Nothing is
// written to the API server here: the runner is already gone from GitHub.
func (d *decider) retireEphemeralRunner(run *arc.Runner, pod *corev1.Pod, dec Decision) Decision {
	d.retirements.Add(*run, pod.UID)
	dec.Message += fmt.Sprintf("; EphemeralRunner %s is retired once the pod is gone, so ARC creates a fresh runner", run.EphemeralRunner)
	return dec
}

// record writes GitHub's answer into the memories (memory.go), the only
// place a review writes them, under the keys resolve recalled them by: a
// look-up GitHub answered in time; an unregister GitHub received, whose
// failure backs the pod's next ones off and whose success ends that; and
// for an unregister, the runner's "busy" (trusted for longer while it
// lasts, as long as the review said: r.Busy.Next) or its end, and a runner
// gone (the deletion's repeats are admitted without asking again, rule 5b).
func (d *decider) record(r *review, readOnly bool) {
	res, k := r.GitHub, r.Recalled.keys
	if !r.Recalled.Read {
		return // nothing was asked
	}
	if readOnly {
		if res.call == callStatus && !res.cut {
			d.statuses.remember(k.status, githubResult{Status: res.Status, Err: res.Err})
		}
		return
	}
	if res.call == callUnregister {
		if res.Err == nil {
			d.failures.forget(k.pod)
		} else {
			d.failures.failed(k.pod, res.Err)
		}
	}
	if res.Err != nil {
		return
	}
	switch res.Outcome {
	case ghclient.Busy:
		if res.From != knowMemory {
			d.busy.busy(k.runner, r.Busy.Next)
		}
	case ghclient.Removed, ghclient.NotFound:
		d.removed(k)
	default:
		d.busy.forget(k.runner)
	}
}

// removed records a runner GitHub no longer has: it can get no job, so the
// API server's repeats of its pod's deletion are admitted without asking
// again (rule 5b), and it is busy no more.
func (d *decider) removed(k memoryKeys) {
	d.memory.remember(k.pod)
	d.busy.forget(k.runner)
}

// remember stores an admitted deletion of the pod's runner.
func (m *admittedMemory) remember(k admittedKey) {
	if m.entries == nil || k.uid == "" {
		return
	}
	m.entries.Add(k, struct{}{})
}

// busy records a "busy" answer, trusted for at least the wait the review
// recalled for it (busyMemo.Next, which a decision may already have named).
func (m *busyMemory) busy(k string, least time.Duration) {
	if m.entries != nil {
		m.entries.NextAtLeast(k, least, func(struct{}) struct{} { return struct{}{} })
	}
}

// forget drops a runner GitHub no longer reports busy.
func (m *busyMemory) forget(k string) {
	if m.entries != nil {
		m.entries.Forget(k)
	}
}

// remember stores a read-only answer.
func (m *statusMemory) remember(k string, res githubResult) {
	if m.entries != nil {
		m.entries.Add(k, res)
	}
}

// failed records err for the pod's runner, backing its next decisions off.
func (m *failureMemory) failed(k admittedKey, err error) {
	if k.uid != "" {
		m.entries.Next(k, err)
	}
}

func (m *failureMemory) forget(k admittedKey) { m.entries.Forget(k) }

// Admitted and Cancel settle an eviction's budget hold (budgets.go): they
// are effects of a decision, so they live with settle, its only caller in a
// review; the drain (package disruption) settles its own holds with them.

// Admitted says the eviction was let through: once the API server's
// deadline has passed, a new version of the budget accounts for it.
func (h BudgetHold) Admitted() {
	if h.ledger == nil {
		return
	}
	h.ledger.mu.Lock()
	defer h.ledger.mu.Unlock()
	if e := h.ledger.byBudget[h.budget][h.pod]; e != nil && e.answered.IsZero() {
		e.answered = h.ledger.now()
	}
}

// Cancel gives the disruption back: the eviction will not happen (refused,
// or the runner could not be released). Another hold on the same pod's
// eviction (the drain's and a review's overlap) keeps it, as does one
// already let through (Admitted).
func (h BudgetHold) Cancel() {
	if h.ledger == nil || h.budget.Name == "" {
		return
	}
	h.ledger.mu.Lock()
	entries := h.ledger.byBudget[h.budget]
	e := entries[h.pod]
	release := false
	if e != nil {
		e.holders--
		if e.holders <= 0 && e.answered.IsZero() {
			delete(entries, h.pod)
			if len(entries) == 0 {
				delete(h.ledger.byBudget, h.budget)
			}
			release = e.shared
		}
	}
	h.ledger.mu.Unlock()
	if release && h.ledger.shared != nil {
		// Given back at once, so the other replicas need not wait for it
		// to expire (failing that, it expires), and beside the answer: a
		// refusal does not wait for a write to the Lease, and meanwhile the
		// others count the disruption, which only keeps an eviction longer.
		go h.ledger.shared.giveBack(h.budget, h.pod, h.podName, h.ledger.now(), h.ledger.hold)
	}
}
