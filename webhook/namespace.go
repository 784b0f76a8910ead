package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// ReasonNamespaceDeleting: the pod's namespace is being deleted, its
// EphemeralRunner's githubConfigSecret is already gone, runner-guard has no
// static credentials, and ARC records no job on the runner (docs/DESIGN.md,
// "A namespace being deleted").
const ReasonNamespaceDeleting Reason = "namespace-deleting"

// EventNamespaceDeleting is the Event of a pod let go by ruleNamespaceDeleting.
const EventNamespaceDeleting = "RunnerNamespaceDeleting"

// Rule 4g: in a namespace being deleted whose credentials Secret went first,
// nothing can ask GitHub and nothing can recreate the pod; refusing an idle
// runner would keep the namespace Terminating forever. The pod goes, loudly.
// (A recorded job keeps the pod: arc.Resolver reports the credentials
// unusable then, and with static credentials those ask GitHub instead.)
func ruleNamespaceDeleting(r *review, _ *policy) (Decision, bool) {
	if r.ARC == nil || r.ARC.NamespaceDeleting == "" {
		return Decision{}, false
	}
	d := allow(ReasonNamespaceDeleting, fmt.Sprintf("runner %q of pod %s: %s", r.ARC.Name, r.podRef(), r.ARC.NamespaceDeleting))
	d.Warning = d.Message
	d.EventType, d.EventReason = corev1.EventTypeWarning, EventNamespaceDeleting
	return d, true
}
