package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/runner-guard/runner-guard/webhook/arc"
)

// settle carries out what a decision made after the review was resolved
// implies, in one place: the decisions-from-knowledge metric, the budget
// disruption reserved for an eviction (kept when it is let through, given
// back otherwise), and the EphemeralRunner of a runner runner-guard
// unregistered, handed over to be retired. asked says GitHub's answer was
// read (the GitHub rules decided).
func (d *decider) settle(r *review, dec Decision, asked bool) Decision {
	if dec.Reason == ReasonJobRunning {
		d.metrics.knowledge(knowJobFields)
	} else if asked && !r.readOnly(&d.policy) {
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
